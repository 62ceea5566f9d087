"""Device specifications for the analytic cost model, each number with its public source.

The roofline time of an operator on a device is ``max(flops / peak_flops, bytes / memory_bandwidth) +
launch_overhead``. ``peak_flops`` is the dense FP32 figure (no TF32): what an FP32 graph runs at. An operator
whose output is FP16 or BF16 runs at the device's dense tensor-core rate for that type (``fp16_peak_flops``,
``bf16_peak_flops``; the datasheets' figures "with sparsity" are twice these) where the device has one, else
at its FP32 rate (a V100 or T4 has no BF16 tensor cores, the catalogue's Xeon no BF16 instructions); the bytes
of a 16-bit tensor are half an FP32 one's by themselves. Calibrate against measurements where a device is
present (see :mod:`diviml.frontends.pytorch`).

A CPU entry (``cores`` > 1) is a whole socket: an operator runs on one core per GRAIN_SIZE units of its work
(:func:`cores_used`) and gets that share of the peak and bandwidth; where the profiling host was measured, a
CPU's times are derived from the host's by the rule in :mod:`diviml.frontends.host`.

Launch overhead on a GPU is what PyTorch eager pays per operator, measured: the median time of the
single-kernel elementwise operators (49 relu, 16 add, each under 1 us of kernel work) of resnet50 at batch 1
on the lent H100 (examples/resnet50_h100.json, CUDA events around back-to-back calls), 12.2 us. That cost is
the host's (Python, dispatcher, driver launch), not the GPU's, so the same figure stands for the GPU types
that were not measured.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .errors import InputError


@dataclass(frozen=True)
class DeviceSpec:
    name: str
    peak_flops: float  # FLOP/s, FP32 dense
    memory_bandwidth: float  # bytes/s
    memory_bytes: float
    launch_overhead: float  # seconds per operator
    sources: dict
    cores: int = 1  # a CPU socket's cores (operators spread over them by GRAIN_SIZE); 1 for a GPU
    fp16_peak_flops: float | None = None  # FLOP/s, FP16 tensor cores, dense (None: no faster than FP32)
    bf16_peak_flops: float | None = None  # FLOP/s, BF16 likewise

    @property
    def is_cpu(self) -> bool:
        return self.cores > 1

    def peak(self, dtype: str | None = None) -> float:
        """FLOP/s for operators whose output is of ``dtype`` ("float16", "bfloat16"; else FP32)."""
        half = {"float16": self.fp16_peak_flops, "bfloat16": self.bf16_peak_flops}.get(dtype or "")
        return half or self.peak_flops

    def work(self, flops: float, nbytes: float, outputs: float | None = None, dtype: str | None = None) -> float:
        """Seconds of compute or memory traffic for an operator whose output has ``outputs`` elements of
        ``dtype`` (on a CPU it gets the share of the socket that :func:`cores_used` gives it)."""
        share = cores_used(self.cores, outputs, flops) / self.cores
        return max(flops / (self.peak(dtype) * share), nbytes / (self.memory_bandwidth * share))

    def roofline(self, flops: float, nbytes: float, outputs: float | None = None, dtype: str | None = None) -> float:
        return self.work(flops, nbytes, outputs, dtype) + self.launch_overhead


# PyTorch's at::internal::GRAIN_SIZE (ATen/Parallel.h): at::parallel_for hands each thread at least this many
# elements, so an elementwise operator with a smaller output runs on one core.
GRAIN_SIZE = 32768


def cores_used(cores: int, outputs: float | None, flops: float = 0.0) -> int:
    """Cores an operator spreads over: one per GRAIN_SIZE units of work, at most ``cores`` (all of them when
    the output size is unknown). The units are output elements for elementwise operators and multiply-adds
    (flops / 2) for contractions, which BLAS and oneDNN split over output blocks rather than elements: the
    larger of the two."""
    if outputs is None:
        return cores
    return max(1, min(cores, math.ceil(max(outputs, flops / 2) / GRAIN_SIZE)))

GPU_LAUNCH = 12.2e-6
GPU_LAUNCH_SOURCE = ("measured: median of resnet50's single-kernel elementwise operators at batch 1 on the lent "
                     "H100, PyTorch eager (examples/resnet50_h100.json); host-bound, so used for every GPU type")


CATALOGUE: dict[str, DeviceSpec] = {s.name: s for s in (
    DeviceSpec("cpu", 1.6e12, 140.8e9, 192e9, 1.4e-6, {
        "peak_flops": "Intel Xeon Gold 6248: 20 cores x 2.5 GHz x 2 AVX-512 FMA units x 16 FP32 lanes x 2 = 1.6 TFLOP/s "
                      "(Intel ark: 20 cores, 2.5 GHz base, 2 FMA units)",
        "memory_bandwidth": "6 channels DDR4-2933 x 8 bytes x 2933 MT/s = 140.8 GB/s (Intel ark: 6 channels DDR4-2933)",
        "memory_bytes": "assumed 192 GB host RAM",
        "launch_overhead": "measured: torch.neg on a one-element tensor, one thread, torch 2.14 eager, 1.4 us on the "
                           "development host (AMD EPYC); used only where no host was measured"}, cores=20),
    DeviceSpec("v100", 14e12, 900e9, 16e9, GPU_LAUNCH, {
        "peak_flops": "NVIDIA Tesla V100 PCIe datasheet: 14 TFLOP/s FP32",
        "memory_bandwidth": "NVIDIA Tesla V100 datasheet: 900 GB/s HBM2",
        "memory_bytes": "NVIDIA Tesla V100 datasheet: 16 GB variant",
        "launch_overhead": GPU_LAUNCH_SOURCE,
        "half_peak_flops": "NVIDIA Tesla V100 PCIe datasheet: 112 TFLOP/s tensor performance (FP16); no BF16 tensor "
                           "cores"},
        fp16_peak_flops=112e12),
    DeviceSpec("a100", 19.5e12, 1555e9, 40e9, GPU_LAUNCH, {
        "peak_flops": "NVIDIA A100 datasheet: 19.5 TFLOP/s FP32",
        "memory_bandwidth": "NVIDIA A100 40GB PCIe datasheet: 1,555 GB/s HBM2",
        "memory_bytes": "NVIDIA A100 datasheet: 40 GB variant",
        "launch_overhead": GPU_LAUNCH_SOURCE,
        "half_peak_flops": "NVIDIA A100 datasheet: 312 TFLOP/s BF16 / FP16 Tensor Core (624 with sparsity)"},
        fp16_peak_flops=312e12, bf16_peak_flops=312e12),
    DeviceSpec("h100", 51e12, 2.0e12, 80e9, GPU_LAUNCH, {
        "peak_flops": "NVIDIA H100 datasheet: 51 TFLOP/s FP32 (H100 PCIe)",
        "memory_bandwidth": "NVIDIA H100 datasheet: 2 TB/s HBM2e (H100 PCIe)",
        "memory_bytes": "NVIDIA H100 datasheet: 80 GB",
        "launch_overhead": GPU_LAUNCH_SOURCE,
        "half_peak_flops": "NVIDIA H100 datasheet: 1,513 TFLOP/s BF16 / FP16 Tensor Core with sparsity (H100 PCIe): "
                           "756 dense"},
        fp16_peak_flops=756e12, bf16_peak_flops=756e12),
    DeviceSpec("h100-sxm", 67e12, 3.35e12, 80e9, GPU_LAUNCH, {
        "peak_flops": "NVIDIA H100 datasheet: 67 TFLOP/s FP32 (H100 SXM)",
        "memory_bandwidth": "NVIDIA H100 datasheet: 3.35 TB/s HBM3 (H100 SXM)",
        "memory_bytes": "NVIDIA H100 datasheet: 80 GB",
        "launch_overhead": GPU_LAUNCH_SOURCE,
        "half_peak_flops": "NVIDIA H100 datasheet: 1,979 TFLOP/s BF16 / FP16 Tensor Core with sparsity (H100 SXM): "
                           "989 dense"},
        fp16_peak_flops=989e12, bf16_peak_flops=989e12),
    DeviceSpec("h200", 67e12, 4.8e12, 141e9, GPU_LAUNCH, {
        "peak_flops": "NVIDIA H200 datasheet: 67 TFLOP/s FP32 (H200 SXM)",
        "memory_bandwidth": "NVIDIA H200 datasheet: 4.8 TB/s HBM3e",
        "memory_bytes": "NVIDIA H200 datasheet: 141 GB",
        "launch_overhead": GPU_LAUNCH_SOURCE,
        "half_peak_flops": "NVIDIA H200 datasheet: 1,979 TFLOP/s BF16 / FP16 Tensor Core with sparsity: 989 dense"},
        fp16_peak_flops=989e12, bf16_peak_flops=989e12),
    DeviceSpec("l4", 30.3e12, 300e9, 24e9, GPU_LAUNCH, {
        "peak_flops": "NVIDIA L4 datasheet: 30.3 TFLOP/s FP32",
        "memory_bandwidth": "NVIDIA L4 datasheet: 300 GB/s GDDR6",
        "memory_bytes": "NVIDIA L4 datasheet: 24 GB",
        "launch_overhead": GPU_LAUNCH_SOURCE,
        "half_peak_flops": "NVIDIA L4 datasheet: 242 TFLOP/s FP16 / BF16 Tensor Core with sparsity: 121 dense"},
        fp16_peak_flops=121e12, bf16_peak_flops=121e12),
    DeviceSpec("t4", 8.1e12, 320e9, 16e9, GPU_LAUNCH, {
        "peak_flops": "NVIDIA T4 datasheet: 8.1 TFLOP/s FP32",
        "memory_bandwidth": "NVIDIA T4 datasheet: 320+ GB/s GDDR6",
        "memory_bytes": "NVIDIA T4 datasheet: 16 GB",
        "launch_overhead": GPU_LAUNCH_SOURCE,
        "half_peak_flops": "NVIDIA T4 datasheet: 65 TFLOP/s mixed precision (FP16/FP32); no BF16 tensor cores"},
        fp16_peak_flops=65e12),
    DeviceSpec("a10", 31.2e12, 600e9, 24e9, GPU_LAUNCH, {
        "peak_flops": "NVIDIA A10 datasheet: 31.2 TFLOP/s FP32",
        "memory_bandwidth": "NVIDIA A10 datasheet: 600 GB/s GDDR6",
        "memory_bytes": "NVIDIA A10 datasheet: 24 GB",
        "launch_overhead": GPU_LAUNCH_SOURCE,
        "half_peak_flops": "NVIDIA A10 datasheet: 125 TFLOP/s BF16 / FP16 Tensor Core (250 with sparsity)"},
        fp16_peak_flops=125e12, bf16_peak_flops=125e12),
    DeviceSpec("l40s", 91.6e12, 864e9, 48e9, GPU_LAUNCH, {
        "peak_flops": "NVIDIA L40S datasheet: 91.6 TFLOP/s FP32",
        "memory_bandwidth": "NVIDIA L40S datasheet: 864 GB/s GDDR6",
        "memory_bytes": "NVIDIA L40S datasheet: 48 GB",
        "launch_overhead": GPU_LAUNCH_SOURCE,
        "half_peak_flops": "NVIDIA L40S datasheet: 733 TFLOP/s FP16 / BF16 Tensor Core with sparsity: 362 dense"},
        fp16_peak_flops=362e12, bf16_peak_flops=362e12),
    DeviceSpec("rtx4090", 82.6e12, 1008e9, 24e9, GPU_LAUNCH, {
        "peak_flops": "NVIDIA Ada Lovelace architecture whitepaper (GeForce RTX 4090): 82.6 TFLOP/s FP32",
        "memory_bandwidth": "NVIDIA GeForce RTX 4090 specifications: 1,008 GB/s GDDR6X (21 Gbps x 384-bit)",
        "memory_bytes": "NVIDIA GeForce RTX 4090 specifications: 24 GB",
        "launch_overhead": GPU_LAUNCH_SOURCE,
        "half_peak_flops": "NVIDIA Ada Lovelace architecture whitepaper (GeForce RTX 4090): 165.2 TFLOP/s FP16 / "
                           "BF16 Tensor with FP32 accumulate, dense"},
        fp16_peak_flops=165.2e12, bf16_peak_flops=165.2e12),
    DeviceSpec("mi300x", 81.7e12, 5.3e12, 192e9, GPU_LAUNCH, {
        "peak_flops": "AMD Instinct MI300X datasheet: 81.7 TFLOP/s FP32 vector (163.4 matrix, not used: see the "
                      "module docstring)",
        "memory_bandwidth": "AMD Instinct MI300X datasheet: 5.3 TB/s HBM3",
        "memory_bytes": "AMD Instinct MI300X datasheet: 192 GB",
        "launch_overhead": GPU_LAUNCH_SOURCE + " (assumed the same for ROCm's eager launches)",
        "half_peak_flops": "AMD Instinct MI300X datasheet: 1,307.4 TFLOP/s FP16 / BF16 matrix, dense"},
        fp16_peak_flops=1307.4e12, bf16_peak_flops=1307.4e12),
)}


# How a CUDA device's reported name maps to a catalogue entry, most specific first.
CUDA_NAMES: tuple[tuple[str, str], ...] = (
    (r"\bh200\b", "h200"), (r"\bh100\b.*\b(sxm\w*|hbm3)\b", "h100-sxm"), (r"\bh100\b", "h100"),
    (r"\ba100\b", "a100"), (r"\bv100\b", "v100"), (r"\bl40s\b", "l40s"), (r"\bl4\b", "l4"), (r"\bt4\b", "t4"),
    (r"\ba10\b", "a10"), (r"\brtx 4090\b", "rtx4090"), (r"\bmi300x\b", "mi300x"))


def device_type_of(cuda_name: str) -> str:
    """The catalogue name for a CUDA device name such as 'NVIDIA H100 80GB HBM3' (-> 'h100-sxm'), so that its
    measured times sit beside the roofline of the same device; 'cuda' when the catalogue has no entry."""
    name = cuda_name.lower()
    return next((key for pattern, key in CUDA_NAMES if re.search(pattern, name)), "cuda")


def spec(name: str) -> DeviceSpec:
    if name not in CATALOGUE:
        raise InputError(f"no device spec for {name!r}: choose one of {', '.join(CATALOGUE)}")
    return CATALOGUE[name]

