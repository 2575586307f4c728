"""The weights the rollouts serve between syncs (semi-online training)."""

from __future__ import annotations

import torch


class PublishedCopy(torch.nn.Module):
    """The trained parameters as last published to the rollouts, and their policy version: with
    ``sync_every`` = s > 1 (semi-online, Lanchantin et al. 2025, arXiv:2506.21495) the rollouts
    serve this snapshot between syncs, so a checkpoint keeps it and a resume serves it again."""

    def __init__(self, policy: torch.nn.Module) -> None:
        super().__init__()
        self.names = [n for n, p in policy.named_parameters() if p.requires_grad]
        params = dict(policy.named_parameters())
        for i, name in enumerate(self.names):
            self.register_buffer(f"p{i}", params[name].detach().clone())
        self.register_buffer("version", torch.zeros((), dtype=torch.long))

    def refresh(self, policy: torch.nn.Module, version: int) -> None:
        """Copy the policy's trained parameters in, as ``version``."""
        params = dict(policy.named_parameters())
        with torch.no_grad():
            for i, name in enumerate(self.names):
                getattr(self, f"p{i}").copy_(params[name])
        self.version.fill_(version)

    def swap(self, policy: torch.nn.Module) -> None:
        """Exchange the policy's trained parameters with the copy's (twice: as before)."""
        params = dict(policy.named_parameters())
        with torch.no_grad():
            for i, name in enumerate(self.names):
                mine = getattr(self, f"p{i}")
                kept = params[name].detach().clone()
                params[name].copy_(mine)
                mine.copy_(kept)
