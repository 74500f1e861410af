# A PyTorch DistributedDataParallel job on an Atoll slice (DESIGN.md Part F).
# Atoll gang-starts one process per device with the torchrun environment
# (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...): init_method="env://"
# just works. Each rank trains on its part of the batch; gradients are
# averaged by DDP over gloo; rank 0 reports the loss, every rank writes its
# final weights as an output (.npy), which later computations can take.
import os

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(1)
X = torch.randn(256, 8, generator=g)
Y = (X.sum(dim=1, keepdim=True) > 0).float()
per = X.shape[0] // world
xs, ys = X[rank * per:(rank + 1) * per], Y[rank * per:(rank + 1) * per]
for step in range(20):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(xs), ys)
    loss.backward()
    opt.step()
    if rank == 0 and step % 5 == 4:
        print(f"step {step + 1}: loss {loss.item():.4f} (rank 0 of {world}, devices "
              f"{os.environ['ATOLL_DEVICES']})")
w = torch.cat([p.detach().flatten() for p in model.parameters()]).numpy()
np.save(os.environ["ATOLL_OUTPUT_DIR"] + "/weights.npy", w.astype(np.float32))
dist.destroy_process_group()
