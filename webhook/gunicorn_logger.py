"""gunicorn's logger with its access log only when `accesslog` is set.

gunicorn turns the access log on whenever a `logconfig_dict` is given, and ours always is (gunicorn's
lines go through migops.logs), so every admission review would be a log line: at a rollout's rate
that is most of the log and a cost on every request. The webhook's metrics count the requests.
"""

from __future__ import annotations

from gunicorn import glogging


class Logger(glogging.Logger):
    @property
    def access_log_enabled(self) -> bool:
        return bool(self.cfg.accesslog)
