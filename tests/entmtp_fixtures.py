"""A small EntMTP tree bank, for the EntMTP and sync tests."""

from specbench.trees.entmtp import save_bank, task_trees


class LinearCosts:
    def target_ms(self, batch, context, n):
        return 10 + 1.0 * n

    def draft_ms(self, batch, context, n):
        return 1.0 + 0.5 * n


def small_bank(tmp_path):
    history = [
        {"size": 2, "depth": 1, "accept_biased": 0.5, "choices": [[0]]},
        {"size": 4, "depth": 2, "accept_biased": 1.2, "choices": [[0], [1], [0, 0]]},
        {"size": 6, "depth": 3, "accept_biased": 1.9, "choices": [[0], [1], [0, 0], [0, 1], [0, 0, 0]]},
    ]
    path = tmp_path / "bank.json"
    save_bank(path, {"gsm8k": task_trees(history, LinearCosts(), 100)}, {"model": "tiny"})
    return path
