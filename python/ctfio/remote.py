"""Endpoint, credentials and cache directory for remote data (``s3://`` and ``http(s)://``
paths; docs/remote.md).

The C library never reads the environment: this module resolves what the AWS tools users
already have (``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``/``AWS_DEFAULT_REGION``,
``AWS_PROFILE`` with the shared credentials and config files) and ``CTFIO_CACHE_DIR``, with
explicit ``storage_options`` first, into the options record the reader takes.
"""

import configparser
import os

_REMOTE_PREFIXES = ("s3://", "http://", "https://")

#: storage_options keys and the record's field each one fills.
_OPTION_KEYS = {
    "endpoint": "endpoint", "endpoint_url": "endpoint",
    "key": "access_key_id", "access_key_id": "access_key_id",
    "secret": "secret_access_key", "secret_access_key": "secret_access_key",
    "token": "session_token", "session_token": "session_token",
    "region": "region", "region_name": "region",
    "max_retries": "max_retries", "timeout_ms": "timeout_ms",
    "connect_timeout_ms": "connect_timeout_ms", "backoff_ms": "backoff_ms",
    "anon": None, "profile": None,
}


def is_remote(path):
    """True for an ``s3://``, ``http://`` or ``https://`` path."""
    return isinstance(path, str) and path.startswith(_REMOTE_PREFIXES)


def any_remote(paths):
    if isinstance(paths, (list, tuple)):
        return any(is_remote(p) for p in paths)
    return is_remote(paths)


def default_cache_dir(env=None):
    """``CTFIO_CACHE_DIR``, else ``$XDG_CACHE_HOME/ctfio``, else ``~/.cache/ctfio``."""
    env = os.environ if env is None else env
    if env.get("CTFIO_CACHE_DIR"):
        return env["CTFIO_CACHE_DIR"]
    home = env.get("HOME") or os.path.expanduser("~")
    base = env.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    return os.path.join(base, "ctfio")


def _ini(path, section):
    cp = configparser.ConfigParser(interpolation=None)
    try:
        cp.read(path)
    except configparser.Error:
        return {}
    return dict(cp[section]) if cp.has_section(section) else {}


def _profile(env, profile):
    """The profile's keys from the shared credentials file and its region from the config
    file (``[profile NAME]`` there, ``[default]`` for the default)."""
    home = env.get("HOME") or os.path.expanduser("~")
    cred_file = env.get("AWS_SHARED_CREDENTIALS_FILE") or os.path.join(home, ".aws",
                                                                       "credentials")
    conf_file = env.get("AWS_CONFIG_FILE") or os.path.join(home, ".aws", "config")
    creds = _ini(cred_file, profile)
    conf = _ini(conf_file, profile if profile == "default" else "profile " + profile)
    return creds, conf


def resolve(storage_options=None, cache_dir=None, env=None):
    """The reader's ``remote`` record: explicit ``storage_options`` (endpoint, key, secret,
    token, region, max_retries, timeout_ms, connect_timeout_ms, backoff_ms, anon, profile),
    then the environment, then the shared files. ``cache_dir``: None for the default
    (:func:`default_cache_dir`), False for no index caches."""
    env = os.environ if env is None else env
    so = dict(storage_options or {})
    out = {}
    for k, v in so.items():
        if k not in _OPTION_KEYS:
            raise TypeError("storage_options: unknown option %r (known: %s)"
                            % (k, ", ".join(sorted(_OPTION_KEYS))))
        if _OPTION_KEYS[k] and v is not None:
            out[_OPTION_KEYS[k]] = v
    if "endpoint" not in out:
        ep = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
        if ep:
            out["endpoint"] = ep
    profile = so.get("profile") or env.get("AWS_PROFILE") or "default"
    creds, conf = _profile(env, profile)
    if so.get("anon"):
        for k in ("access_key_id", "secret_access_key", "session_token"):
            out.pop(k, None)
    elif "access_key_id" not in out:
        if env.get("AWS_ACCESS_KEY_ID"):
            out["access_key_id"] = env["AWS_ACCESS_KEY_ID"]
            out["secret_access_key"] = env.get("AWS_SECRET_ACCESS_KEY")
            if env.get("AWS_SESSION_TOKEN"):
                out["session_token"] = env["AWS_SESSION_TOKEN"]
        elif creds.get("aws_access_key_id"):
            out["access_key_id"] = creds["aws_access_key_id"]
            out["secret_access_key"] = creds.get("aws_secret_access_key")
            if creds.get("aws_session_token"):
                out["session_token"] = creds["aws_session_token"]
    if "region" not in out:
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or conf.get("region")
        if region:
            out["region"] = region
    if cache_dir is None:
        cache_dir = default_cache_dir(env)
    if cache_dir:
        out["cache_dir"] = os.fspath(cache_dir)
    return out
