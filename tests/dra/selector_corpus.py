"""Selectors as users, the docs, the tests and Kubernetes' DRA CEL environment write them: what the
compiled CEL runtime (migops.mig.selectors) is checked against cel-python on, and timed on."""

from __future__ import annotations

from migops.mig.catalogue import catalogue
from migops.mig.dra import MIG_CLASS_EXPRESSION, profile_device_classes

A = "device.attributes['gpu.nvidia.com']"
C = "device.capacity['gpu.nvidia.com']"

CORPUS: tuple[str, ...] = (
    MIG_CLASS_EXPRESSION,
    *dict.fromkeys(
        c["spec"]["selectors"][0]["cel"]["expression"] for c in profile_device_classes(catalogue().gpus[:4])
    ),
    f"{A}.profile == '3g.40gb'",
    f"{A}.profile == '3g.45gb'",
    f"{A}.profile == '1g.10gb+me'",
    'device.attributes["gpu.nvidia.com"].profile == "3g.40gb"',
    f"{A}.profile in ['1g.10gb', '2g.20gb']",
    f"{A}.profile.startsWith('3g.')",
    f"{A}.profile.endsWith('gb')",
    f"{A}.profile.contains('+')",
    f"{A}.profile.matches('^[0-9]g[.]')",
    f"{A}.type == 'gpu'",
    f"{A}.architecture == 'Hopper'",
    f"{A}.brand == 'Nvidia'",
    f"{A}.productName == 'NVIDIA H100 80GB HBM3'",
    f"{A}.productName.startsWith('NVIDIA H100')",
    f"{A}.productName.lowerAscii().contains('a100')",
    f"{A}.driverVersion.isGreaterThan(semver('550.0.0'))",
    f"has({A}.uuid)",
    f"{A}.parentUUID == 'GPU-1'",
    "device.driver == 'gpu.nvidia.com'",
    "device.allowMultipleAllocations == false",
    f"size({A}) >= 5",
    f"{C}.memory.compareTo(quantity('30Gi')) >= 0",
    f"{C}.memory.isGreaterThan(quantity('40Gi'))",
    f"{C}.memory == quantity('40192Mi')",
    f"{C}.memory.add(quantity('1Gi')).compareTo(quantity('41Gi')) > 0",
    f"{C}.memory.sub(1).isLessThan(quantity('20Gi'))",
    f"{C}.memory.add(5).isGreaterThan(quantity('10Gi'))",
    f"{C}.memory.asInteger() > 40000000000",
    f"{C}.memory.isInteger()",
    f"{C}.memory.asApproximateFloat() > 1.0e10",
    f"{C}.memory.sign() == 1",
    f"{C}.multiprocessors.isLessThan(quantity('70'))",
    f"{C}.multiprocessors.compareTo(quantity('0.5k')) < 0",
    f"{C}.copyEngines.asInteger() >= 3",
    f"{C}.decoders.compareTo(quantity('1')) >= 0",
    f"{C}.exists(k, k.startsWith('memorySlice'))",
    f"{C}.memory.isGreaterThan(quantity('30Gi')) && {A}.cudaComputeCapability.compareTo(semver('9.0.0')) >= 0",
    f"{A}.cudaComputeCapability.isGreaterThan(semver('8.0.0'))",
    f"{A}.cudaComputeCapability == semver('9.0.0')",
    f"{A}.cudaComputeCapability.major() >= 9",
    f"{A}.cudaComputeCapability.minor() == 0 && {A}.cudaComputeCapability.patch() == 0",
    f"{A}.cudaComputeCapability.isLessThan(semver('v10', true))",
    "isSemver('1.2.3') && !isSemver('1.2') && isSemver('v1.2', true)",
    "isQuantity('1Gi') && !isQuantity('1 Gi')",
    "semver('1.0.0-rc.1').isLessThan(semver('1.0.0'))",
    "quantity('2k').asInteger() == 2000 && quantity('1e3') == quantity('1k')",
    "quantity('1.5').isInteger()",
    "quantity('100m').asApproximateFloat() == 0.1",
    f"{A}.profile.split('.')[0] == '3g'",
    f"{A}.profile.replace('gb', 'GB') == '3g.40GB'",
    f"{A}.profile.upperAscii() == '3G.40GB'",
    f"{A}.profile.indexOf('.') == 2",
    f"{A}.profile.lastIndexOf('g') > 2",
    f"{A}.profile.substring(0, 2) == '3g'",
    f"{A}.profile.charAt(0) == '7'",
    "['a', 'b'].join('-') == 'a-b' && ' x '.trim() == 'x'",
    f"[{A}.profile].exists(p, p.startsWith('1g'))",
    f"{A}.profile.size() > 6",
    # failures: on every device, or only where a key is absent
    "1 / 0 == 1",
    "quantity('x').isInteger()",
    f"{C}.memory.isGreaterThan(semver('1.0.0'))",
    f"{A}.nosuch == 1",
    "device.attributes[",
)
