"""Endpoint, credentials and cache directory for remote data (``s3://`` and ``http(s)://``
paths; docs/remote.md).

The C library never reads the environment: this module resolves what the AWS tools users
already have (``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``/``AWS_DEFAULT_REGION``,
``AWS_PROFILE`` with the shared credentials and config files) and ``CTFIO_CACHE_DIR``, with
explicit ``storage_options`` first, into the options record the reader takes. When botocore is
installed and none of those gave keys for an ``s3://`` path, botocore's own credential chain
(credential_process, SSO, assumed roles, the container and instance metadata services) is asked
last.
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


def any_s3(paths):
    """True when a path (or one of a list) is an ``s3://`` path."""
    if isinstance(paths, (list, tuple)):
        return any(any_s3(p) for p in paths)
    return isinstance(paths, str) and paths.startswith("s3://")


def _botocore_keys(env, profile):
    """(key, secret, token) from botocore's credential chain for the profile, or None when
    botocore is not installed or finds none. The shared files are the ones this module read;
    a profile botocore cannot use is no credentials, not an error (the request then goes
    unsigned and the server says what it thinks of that)."""
    try:
        import botocore.exceptions
        import botocore.session
    except ImportError:
        return None
    home = env.get("HOME") or os.path.expanduser("~")
    try:
        s = botocore.session.Session(profile=None if profile == "default" else profile)
        s.set_config_variable("credentials_file", env.get("AWS_SHARED_CREDENTIALS_FILE")
                              or os.path.join(home, ".aws", "credentials"))
        s.set_config_variable("config_file", env.get("AWS_CONFIG_FILE")
                              or os.path.join(home, ".aws", "config"))
        # One short try at the instance metadata service, not botocore's retries.
        s.set_config_variable("metadata_service_timeout", 1)
        s.set_config_variable("metadata_service_num_attempts", 1)
        creds = s.get_credentials()
        frozen = creds.get_frozen_credentials() if creds is not None else None
    except botocore.exceptions.BotoCoreError:
        return None
    if frozen is None or not frozen.access_key or not frozen.secret_key:
        return None
    return frozen.access_key, frozen.secret_key, frozen.token


def resolve(storage_options=None, cache_dir=None, env=None, s3=False, botocore=True):
    """The reader's ``remote`` record: explicit ``storage_options`` (endpoint, key, secret,
    token, region, max_retries, timeout_ms, connect_timeout_ms, backoff_ms, anon, profile),
    then the environment, then the shared files, then (``s3`` true: an ``s3://`` path is read;
    ``botocore`` true and botocore installed) botocore's credential chain. ``cache_dir``: None
    for the default (:func:`default_cache_dir`), False for no index caches."""
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
        elif s3 and botocore:
            keys = _botocore_keys(env, profile)
            if keys:
                out["access_key_id"], out["secret_access_key"] = keys[0], keys[1]
                if keys[2]:
                    out["session_token"] = keys[2]
    if "region" not in out:
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or conf.get("region")
        if region:
            out["region"] = region
    if cache_dir is None:
        cache_dir = default_cache_dir(env)
    if cache_dir:
        out["cache_dir"] = os.fspath(cache_dir)
    return out
