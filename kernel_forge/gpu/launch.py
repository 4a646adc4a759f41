"""What runs on the GPU in one worker run: a loaded CUBIN with its initial globals and the dynamic
shared memory it accepts, and one launch of it (or of a Python baseline) bound to a case's
buffers.  Also the facts of a loaded module the gate's checks read before any launch.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kernel_forge.common.dtypes import from_float
from kernel_forge.common.errors import CudaError
from kernel_forge.gpu import driver
from kernel_forge.gpu.module_state import ModuleState
from kernel_forge.gpu.resident import CaseBuffers
from kernel_forge.gpu.scrubbed_pool import ScrubbedPool
from kernel_forge.model.task import Task
from kernel_forge.model.worker_protocol import KernelSpec, ModuleFacts, ResolvedLaunch

__all__ = ["KernelLaunch", "LoadedModule", "PythonLaunch", "kernel_launch", "module_facts", "python_launch",
           "scalar_arg", "sm_limits"]


def sm_limits(ordinal: int) -> dict[str, int]:
    drv = driver._driver()
    dev = driver.check(drv.cuDeviceGet(ordinal), "cuDeviceGet")
    A = drv.CUdevice_attribute
    names = {"max_threads": "CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR",
             "max_blocks": "CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR",
             "registers": "CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR",
             "shared_memory": "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
             "reserved_smem": "CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK"}
    out = {}
    for key, name in names.items():
        attr = getattr(A, name, None)
        if attr is not None:
            status, value = drv.cuDeviceGetAttribute(attr, dev)
            if status == drv.CUresult.CUDA_SUCCESS:
                out[key] = int(value)
    return out


def scalar_arg(param, value):
    """A scalar kernel argument as (value, ctypes type); half and bf16 as their bits."""
    dt = param.dtype
    if dt.name == "float16":
        return int(np.float16(value).view(np.uint16)), dt.ctype
    if dt.name == "bfloat16":
        return int(from_float(np.array([value], np.float32), dt)[0]), dt.ctype
    return value, dt.ctype


class LoadedModule:
    """A loaded CUBIN, its initial globals and how much dynamic shared memory it accepts.

    :meth:`initial_state` runs before every launch: it copies the load-time image back over the
    module's globals, or, where some global could not be found on the device, loads the module
    afresh (slower, the same guarantee)."""

    def __init__(self, spec: KernelSpec):
        self.spec = spec
        self.module = driver.Module(spec.cubin, spec.entry)
        try:
            self.state = ModuleState(self.module, spec.cubin)
        except BaseException:
            self.module.unload()
            raise
        self.max_dynamic = self.module.attribute("CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES")
        self.smem_error = ""

    @property
    def globals(self) -> dict[str, int]:
        return {g.name: g.size for g in self.state.globals if not g.constant}

    def initial_state(self, stream) -> None:
        if self.state.complete:
            self.state.restore(stream)
            return
        stream.synchronize()
        wanted = self.max_dynamic
        self.module.unload()
        self.module = driver.Module(self.spec.cubin, self.spec.entry)
        self.state = ModuleState(self.module, self.spec.cubin)
        if wanted > self.module.attribute("CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES"):
            self.module.set_max_dynamic_smem(wanted)

    def wipe(self, stream) -> None:
        """After a run: the globals back to their load-time image (a cache filled with an answer is
        not left for a later candidate to find; invariant 11).  A module that reloads before every
        launch is left as it is (its next launch reloads it anyway)."""
        if self.state.complete:
            self.state.restore(stream)

    def allow_dynamic(self, nbytes: int, optin_total: int) -> None:
        """Opt in to ``nbytes`` of dynamic shared memory where the GPU allows it."""
        static = self.module.attribute("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES")
        if nbytes <= self.max_dynamic or nbytes + static > optin_total:
            return
        try:
            self.module.set_max_dynamic_smem(nbytes)
            self.max_dynamic = nbytes
        except CudaError as exc:
            self.smem_error = str(exc)


@dataclass(eq=False)
class KernelLaunch:
    """One launch of a loaded CUDA kernel on the run's stream.  The module is read at every call:
    a module that reloads before each launch (:meth:`LoadedModule.initial_state`) is a new one each time."""

    loaded: LoadedModule
    config: object               #: the resolved launch: grid, block, shared_mem
    stream_ptr: int
    packed: object               #: driver.PackedArgs: the argument values, kept alive with it
    cooperative: bool

    def __call__(self) -> None:
        driver.launch(self.loaded.module, self.config.grid, self.config.block, self.config.shared_mem,
                      self.stream_ptr, self.packed, cooperative=self.cooperative)


@dataclass(eq=False)
class PythonLaunch:
    """One call of a Python baseline on the run's stream; its CuPy temporaries go to ``pool``
    (wiped after the run)."""

    fn: Callable
    kwargs: dict
    stream: object
    pool: ScrubbedPool

    def __call__(self) -> None:
        with self.stream, self.pool.active():
            self.fn(**self.kwargs)




def module_facts(mod: LoadedModule, launches: list[ResolvedLaunch], info, sm: dict[str, int],
                 started: float) -> ModuleFacts:
    """What the gate's checks read of a loaded module before any launch: its attributes, the
    dynamic shared memory allowed for the largest ``launches`` that fits, and the occupancy of
    each launch shape.  ``started``: when loading began (``perf_counter``), for ``seconds``."""
    m = mod.module
    optin = info.max_smem_per_block_optin
    wanted = [l.shared_mem for l in launches if l.shared_mem > 0]
    if wanted:
        fitting = [s for s in wanted if s + m.attribute("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES") <= optin]
        if fitting:
            mod.allow_dynamic(max(fitting), optin)
    drv = driver._driver()
    occupancy = {}
    for launch in launches:
        key = (launch.threads, launch.shared_mem)
        if key in occupancy or launch.shared_mem > mod.max_dynamic or launch.threads < 1:
            continue
        status, blocks = drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(m.function, launch.threads,
                                                                         launch.shared_mem)
        if status == drv.CUresult.CUDA_SUCCESS:
            occupancy[key] = int(blocks)
    return ModuleFacts(
        registers=m.attribute("CU_FUNC_ATTRIBUTE_NUM_REGS"),
        static_smem=m.attribute("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES"),
        local_bytes=m.attribute("CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES"),
        const_bytes=m.attribute("CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES"),
        max_threads_per_block=m.attribute("CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK"),
        param_sizes=m.param_sizes(), max_dynamic_smem=mod.max_dynamic, smem_error=mod.smem_error,
        occupancy=occupancy, globals=mod.globals, sm=dict(sm),
        cooperative=bool(info.cooperative_launch), seconds=time.perf_counter() - started)


def kernel_launch(mod: LoadedModule, launch_cfg, task: Task, bufs: CaseBuffers, stream_ptr: int,
                  optin: int) -> KernelLaunch:
    """The CUDA kernel's launch with its arguments packed (and the dynamic shared memory the
    launch asks for allowed where the GPU can)."""
    if launch_cfg.shared_mem > mod.max_dynamic:
        mod.allow_dynamic(launch_cfg.shared_mem, optin)
    values = []
    for arg in task.args:
        if arg.is_buffer:
            values.append((bufs.kernel_buffer(arg.name).data.ptr, driver.ctypes.c_void_p))
        else:
            values.append(scalar_arg(arg.param, bufs.scalars[arg.name]))
    packed = driver.PackedArgs(values)
    cooperative = bool(getattr(launch_cfg, "cooperative", False))
    return KernelLaunch(mod, launch_cfg, stream_ptr, packed, cooperative)


def python_launch(spec: KernelSpec, task: Task, bufs: CaseBuffers, stream, pool: ScrubbedPool) -> PythonLaunch:
    """The Python baseline's call with its buffers and scalars."""
    from kernel_forge.model.references import load_callable, python_name
    from kernel_forge.model.task import CallableRef
    fn = load_callable(CallableRef("python", Path(spec.module_path), spec.function))
    kwargs = {python_name(a.name): bufs.kernel_buffer(a.name) for a in task.args if a.is_buffer}
    kwargs.update({python_name(k): v for k, v in bufs.scalars.items()})
    return PythonLaunch(fn, kwargs, stream, pool)
