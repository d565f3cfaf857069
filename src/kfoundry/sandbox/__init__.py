"""OS-level restrictions for candidate workers (Landlock, seccomp, process flags)."""
