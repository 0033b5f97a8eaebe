"""The seed quicktour's training loop, with only ``accelerate`` renamed to ``accel``.

Launched on N processes by the integration runner; the main process writes the final weights to
$OUT/weights.pt so the test can compare them with a plain single-process PyTorch run.
"""

import os

import torch

from accel import Accelerator

torch.manual_seed(0)
features = torch.randn(96, 8)
targets = features @ torch.arange(1.0, 9.0) + 0.5

model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
training_dataloader = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(features, targets), batch_size=int(os.environ["PER_RANK_BATCH"])
)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1000)
loss_function = torch.nn.MSELoss()

accelerator = Accelerator()
device = accelerator.device
model, optimizer, training_dataloader, scheduler = accelerator.prepare(
    model, optimizer, training_dataloader, scheduler
)

for _epoch in range(3):
    for batch in training_dataloader:
        optimizer.zero_grad()
        inputs, targets = batch
        outputs = model(inputs)
        loss = loss_function(outputs.squeeze(-1), targets)
        accelerator.backward(loss)
        optimizer.step()
        scheduler.step()

if accelerator.is_main_process:
    state = accelerator.unwrap_model(model).state_dict()
    torch.save(
        {k: v.cpu() for k, v in state.items()}, os.path.join(os.environ["OUT"], "weights.pt")
    )
