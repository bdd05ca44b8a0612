"""Helper launched by test_run_pretraining.py: scripts/run_pretraining.py, signalling itself mid-run.

  INTERRUPT_AT_STEP=k INTERRUPT_SIGNAL=KILL|TERM python tests/interrupted_pretraining.py <the script's flags>

After the host loop that reaches step k the process sends itself the signal: SIGKILL ends it on the spot
(as a lost machine would), SIGTERM asks it to save and stop (as a preemption notice does).
"""

import os
import runpy
import signal
import sys

from bert_tf.training import trainer

AT_STEP = int(os.environ["INTERRUPT_AT_STEP"])
SIGNAL = {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM}[os.environ["INTERRUPT_SIGNAL"]]


def _after_loop(self, step):
  if step == AT_STEP:
    os.kill(os.getpid(), SIGNAL)


trainer.Trainer._after_loop = _after_loop
script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "run_pretraining.py")
sys.argv[0] = script
runpy.run_path(script, run_name="__main__")
