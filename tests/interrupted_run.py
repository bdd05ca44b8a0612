"""Helper launched by tests: a training script (INTERRUPT_SCRIPT, default run_pretraining.py), interrupted mid-run.

  INTERRUPT_AT_STEP=k INTERRUPT_SIGNAL=KILL|TERM|INT|FSIZE python tests/interrupted_run.py <the script's flags>

After the host loop that reaches step k: KILL, TERM and INT send the process that signal (SIGKILL ends it on the
spot, as a lost machine would; SIGTERM asks it to save and stop, as a preemption notice does; SIGINT is Ctrl-C).
FSIZE lowers RLIMIT_FSIZE to FSIZE_BYTES (SIGXFSZ ignored), so the next file write past that size fails with
EFBIG: a full disk, made without root.
"""

import os
import resource
import runpy
import signal
import sys

from bert_tf.training import trainer

AT_STEP = int(os.environ["INTERRUPT_AT_STEP"])
KIND = os.environ["INTERRUPT_SIGNAL"]


def _after_loop(self, step):
  if step != AT_STEP:
    return
  if KIND == "FSIZE":
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    limit = int(os.environ["FSIZE_BYTES"])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
  else:
    os.kill(os.getpid(), {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM, "INT": signal.SIGINT}[KIND])


trainer.Trainer._after_loop = _after_loop
script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts",
                      os.environ.get("INTERRUPT_SCRIPT", "run_pretraining.py"))
sys.argv[0] = script
runpy.run_path(script, run_name="__main__")
