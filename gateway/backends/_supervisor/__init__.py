"""The supervisor of one local job, run as ``python -I -S -c BOOT DIR JOB_DIR`` (``BOOT`` in
``plan``): standard library only, so it imports neither the gateway nor anything a job's
``PYTHON*`` variables could point at. It reads its plan from ``JOB_DIR/launch.json``,
runs the job (in a sandbox unless the plan says ``none``) and records its exit status.

Modules: ``runner`` (the supervisor's main), ``jail`` (namespaces, mounts, privilege drop and
the reaper that is the job's PID 1), ``launch`` (fork and exec of the job itself), ``plan``
(the files the gateway and the supervisor share), ``linux`` (system calls through ctypes).
Every import here is relative: the gateway imports this package as
``gateway.backends._supervisor``, the supervisor as the top-level package ``_supervisor``.
"""
