"""A cost lookup with forward times as functions of n, recording each lookup (CAST's tests and the sync tests)."""


class FakeCosts:
    """Forward ms as functions of n alone; records (model, batch, context, n) of each lookup."""

    def __init__(self, target=lambda n: 10.0, draft=lambda n: 1.0):
        self.target, self.draft, self.calls = target, draft, []

    def target_ms(self, batch, context, n):
        self.calls.append(("target", batch, context, n))
        return self.target(n)

    def draft_ms(self, batch, context, n):
        self.calls.append(("draft", batch, context, n))
        return self.draft(n)
