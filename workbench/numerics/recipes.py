"""How a precision is applied to a run, as names and numbers without torch: capture.py builds the
precisions from them, and the words a report says of a run (wording.py, records.py) name them
without loading torch when a result file is read back."""

AS_BUILT = "as built"  # the model's own dtype, no autocast
CAST = "cast"  # weights and float inputs converted with .to(dtype)
AUTOCAST = "autocast"  # fp32 weights, torch.autocast around forward and loss
LOSS_SCALE_INIT = 2.0**16  # torch.amp.GradScaler's default initial scale
