# The preamble of a GPU call script, sourced from the repository root (`. tools/gpu_experiments/copy_bandwidth.sh`):
# prints the card's name and its copy bandwidth (anna_core.bench.roofline.copy_bandwidth), bounded to 60 s, so every
# call's figures can be read against the card that gave them.
echo "== copy bandwidth $(date +%T)"
timeout 60 python3 -c "
from anna_core.device import accelerator
from anna_core.bench.roofline import copy_bandwidth
import torch; print(torch.cuda.get_device_name(), f'copy bandwidth {copy_bandwidth(accelerator(\"cuda\"))/1e9:.0f} GB/s')
" 2>&1 | tail -2
