"""Code from untrusted objects, run where it cannot hurt the process that asked: DRA selectors judged in
a bounded child process (sandbox/evaluator.py), shared by the webhook, the reconciler and `migops
suggest`."""
