"""Deprecated (one release): Qwen2Model is now `llaisys.models.model.Model`, which runs every
registered architecture; RowSampling and StepResult live in `llaisys.models.step_io`."""

from .model import Model, RowSampling, StepResult

Qwen2Model = Model  # deprecated alias

__all__ = ["Qwen2Model", "RowSampling", "StepResult"]
