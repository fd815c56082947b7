"""Training: the GRPO math (:mod:`~forge.train.grpo`), the trainer's log-probabilities
(:mod:`~forge.train.logprobs`), training rows from episodes (:mod:`~forge.train.batching`),
supervised fine-tuning on teacher episodes (:mod:`~forge.train.sft`), the main job's student
(:mod:`~forge.train.student`) and the veRL backend's glue (:mod:`forge.train.verl`). The Trainer
actors that use them are in :mod:`actors.trainer` and :mod:`actors.verl_trainer`."""
