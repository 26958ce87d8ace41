#!/bin/sh
# make demo: the main job on the embedded cpu-sim device. Until the reference trainer exists
# this demonstrates the parts that do: the device layer, and planning a swap schedule for a
# synthetic training iteration.
set -eu
B=${SS_BUILD:-build}
CLI="$B/smartswap"
echo "smartswap demo: the trainer is not built yet; this shows the device layer and the planner."
echo
"$CLI" info
echo
"$CLI" demo-device
