"""What the parent and its worker processes agree on, named once for both ends: the variable that gives a
worker the descriptor of its channel to the parent, the log file in a worker's folder (its stdout and
stderr), and a fork server's socket (kfoundry.evaluate.parent.forkserver's end and
kfoundry.evaluate.worker.fork_server's)."""

STDERR = "stderr.log"
CHANNEL_FD_ENV = "KFOUNDRY_CHANNEL_FD"
FORK_FD_ENV = "KFOUNDRY_FORK_SERVER_FD"
MAX_MESSAGE = 1 << 20  # the longest message on a fork server's socket
