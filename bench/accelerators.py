"""Dense peak rates of the accelerators bert_tf is meant for, and model-FLOPs utilisation (MFU) against them.

Pure Python (no TensorFlow): `accelerator_check.py`'s parent process and the docs' arithmetic use it without
starting TensorFlow. The figures are the vendors' datasheet peaks WITHOUT 2:4 structured sparsity (NVIDIA's
datasheets print the sparse figure, twice the dense one, with an asterisk); see docs/scale.md for the sources and
which figures were checked against which page.

MFU = model FLOPs per step (`bench_pretraining_throughput.training_flops`: matmuls only, backward = 2 x forward)
/ step seconds / the dense peak of the precision the matmuls run in. float32 matmuls run in TF32 on NVIDIA GPUs
from Ampere on, TensorFlow's default (`tf.config.experimental.enable_tensor_float_32_execution`), so a float32
run is compared with the TF32 peak unless TF32 was switched off.
"""

from __future__ import annotations

import dataclasses
import re


@dataclasses.dataclass(frozen=True)
class Chip:
  """Dense peak TFLOPS by matmul precision; None where the chip has no such unit (or it was not checked)."""
  name: str
  bf16: float
  fp16: float | None
  tf32: float | None
  fp32: float | None
  source: str


CHIPS: dict[str, Chip] = {
    # NVIDIA H100 Tensor Core GPU datasheet: SXM5 BF16/FP16 1,979 and TF32 989 TFLOPS "with sparsity", FP32 67.
    "h100_sxm": Chip("NVIDIA H100 SXM5 80GB", bf16=989.4, fp16=989.4, tf32=494.7, fp32=66.9,
                     source="NVIDIA H100 datasheet (sparse figures halved)"),
    # Same datasheet, PCIe column: BF16/FP16 1,513 and TF32 756 with sparsity, FP32 51.
    "h100_pcie": Chip("NVIDIA H100 PCIe 80GB", bf16=756.0, fp16=756.0, tf32=378.0, fp32=51.0,
                      source="NVIDIA H100 datasheet (sparse figures halved)"),
    # The H200 is the H100's GH100 die with HBM3e: the same tensor-core rates (SXM board).
    "h200": Chip("NVIDIA H200 SXM 141GB", bf16=989.4, fp16=989.4, tf32=494.7, fp32=66.9,
                 source="NVIDIA H200 specifications as quoted by third parties (sparse figures halved)"),
    # NVIDIA A100 datasheet: BF16/FP16 312 (624 sparse), TF32 156 (312 sparse), FP32 19.5; 40 and 80 GB alike.
    "a100": Chip("NVIDIA A100 (SXM4 or PCIe)", bf16=312.0, fp16=312.0, tf32=156.0, fp32=19.5,
                 source="NVIDIA A100 datasheet"),
    # NVIDIA L4 datasheet: FP16/BF16 242 and TF32 120 TFLOPS with sparsity, FP32 30.3.
    "l4": Chip("NVIDIA L4", bf16=121.0, fp16=121.0, tf32=60.0, fp32=30.3,
               source="NVIDIA L4 datasheet (sparse figures halved)"),
    # Cloud TPU documentation, "Peak compute per chip (bf16)". A TPU's float32 matmuls run as bfloat16 passes by
    # default, so every dtype is compared with the bf16 peak.
    "tpu_v5e": Chip("Cloud TPU v5e", bf16=197.0, fp16=None, tf32=None, fp32=None,
                    source="cloud.google.com/tpu/docs/v5e"),
    "tpu_v5p": Chip("Cloud TPU v5p", bf16=459.0, fp16=None, tf32=None, fp32=None,
                    source="cloud.google.com/tpu/docs/v5p"),
}

DTYPES = ("float32", "mixed_bfloat16", "mixed_float16")


def chip_from_device_name(device_name: str) -> str | None:
  """The CHIPS key of a GPU as TensorFlow names it (`tf.config.experimental.get_device_details(gpu)
  ["device_name"]`: "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "NVIDIA L4"), or None when the table has
  no entry for it (H100 NVL, H200 NVL, L40S, ...: pass --peak_tflops)."""
  name = device_name.upper()
  if "NVL" in name:  # NVL boards run at other clocks than SXM; not in the table
    return None
  if "H200" in name:
    return "h200"
  if "H100" in name:
    return "h100_pcie" if "PCIE" in name else "h100_sxm"
  if "A100" in name:
    return "a100"
  if re.search(r"\bL4\b", name):  # not L40 or L40S
    return "l4"
  return None


def precision_of(dtype: str, tf32_enabled: bool = True) -> str:
  """The matmul precision of a run's dtype policy: float32 -> tf32 (or fp32 with TF32 off), mixed_* -> bf16/fp16."""
  if dtype not in DTYPES:
    raise ValueError(f"dtype {dtype!r}: choose one of {DTYPES}")
  return {"mixed_bfloat16": "bf16", "mixed_float16": "fp16"}.get(dtype, "tf32" if tf32_enabled else "fp32")


def peak_tflops(chip: str, dtype: str, tf32_enabled: bool = True) -> float:
  """The chip's dense peak for a run in `dtype`; ValueError naming --chip when the chip or precision is unknown."""
  if chip not in CHIPS:
    raise ValueError(f"--chip={chip}: choose one of {', '.join(CHIPS)}, or pass --peak_tflops")
  entry = CHIPS[chip]
  if chip.startswith("tpu_"):
    return entry.bf16
  value = getattr(entry, precision_of(dtype, tf32_enabled))
  if value is None:
    raise ValueError(f"--chip={chip} has no {precision_of(dtype, tf32_enabled)} peak; pass --peak_tflops")
  return value


def resolve_peak(chip: str | None, given_tflops: float | None, device_name: str | None, dtype: str,
                 tf32_enabled: bool = True) -> tuple[float | None, str]:
  """(peak TFLOPS or None, where it came from): --peak_tflops, else --chip, else the chip detected from the
  device name, else None ("unknown ...: pass --peak_tflops or --chip")."""
  if given_tflops is not None:
    return given_tflops, "--peak_tflops"
  if chip:
    return peak_tflops(chip, dtype, tf32_enabled), f"--chip={chip} ({precision_of(dtype, tf32_enabled)})"
  detected = chip_from_device_name(device_name) if device_name else None
  if detected:
    return (peak_tflops(detected, dtype, tf32_enabled),
            f"{detected}, detected from {device_name!r} ({precision_of(dtype, tf32_enabled)})")
  return None, f"unknown chip ({device_name or 'no GPU'}): pass --peak_tflops or --chip"


def mfu(flops_per_step: float, step_seconds: float, peak: float | None) -> float | None:
  """Model-FLOPs utilisation: achieved FLOP/s over the peak (TFLOPS); None without a peak."""
  if not peak or step_seconds <= 0:
    return None
  return flops_per_step / step_seconds / (peak * 1e12)
