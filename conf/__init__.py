"""The configs of the entry scripts. A package only so that a wheel ships them as `probing.conf` (pyproject.toml),
where the installed commands (probing.console) read them with Hydra's `pkg://probing.conf`."""
