"""Your own model for 'diviml profile' and 'diviml run': a function returning (module, example_inputs).

    diviml profile examples/my_model.py:make --platform cpu-workers-2 --out mine.json
    diviml schedule mine.json --platform cpu-workers-2 --solver exact --out mine_plan.json
    diviml run examples/my_model.py:make mine_plan.json --platform cpu-workers-2 --graph mine.json
"""

import torch


class TwoTowers(torch.nn.Module):
    """Two independent towers joined at the end: a plan can run them on two workers at once."""

    def __init__(self, width: int = 384, depth: int = 4):
        super().__init__()
        self.left = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU())
                                          for _ in range(depth)])
        self.right = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU())
                                           for _ in range(depth)])
        self.head = torch.nn.Linear(2 * width, 10)

    def forward(self, x):
        return self.head(torch.cat([self.left(x), self.right(x)], dim=-1))


def make():
    torch.manual_seed(0)
    return TwoTowers(), (torch.randn(64, 384),)
