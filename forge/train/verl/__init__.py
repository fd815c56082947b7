"""The veRL backend's glue (``trainer.backend: verl``): training rows in veRL's batch layout
(:mod:`~forge.train.verl.batch`) and veRL on CPUs (:mod:`~forge.train.verl.platform`). Its
knobs are :mod:`forge.config.verl`; its actors :mod:`actors.verl_trainer` and
:mod:`actors.verl_rank`."""
