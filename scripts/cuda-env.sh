# Sourced by the GPU scripts: puts the CUDA libraries (driver, NVRTC,
# cuBLAS) on the loader's path; pip wheels keep NVRTC and cuBLAS under
# site-packages/nvidia.
extra=$(python3 - <<'PY' 2>/dev/null
import importlib.util, os
spec = importlib.util.find_spec("nvidia")
dirs = []
for base in (spec.submodule_search_locations if spec else []):
    for sub in ("cu13/lib", "cublas/lib", "cuda_nvrtc/lib"):
        d = os.path.join(base, sub)
        if os.path.isdir(d):
            dirs.append(d)
print(":".join(dirs))
PY
)
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && extra="$extra:$d"
done
export LD_LIBRARY_PATH="${extra#:}:${LD_LIBRARY_PATH:-}"
