"""Reading the operator's files: the GPU catalog and the fleet.

Parsing is pure and lives in the domain (`parse_catalog`, `parse_fleet`); this module only reads
text, from the operator's path or, when none is given, from the copies shipped in the package, and
turns every OS-level failure into a `ConfigError` that says which file and what to do.
"""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

from lowcostgpu.domain.capacity import Host
from lowcostgpu.domain.catalog import Catalog, parse_catalog
from lowcostgpu.domain.errors import ConfigError
from lowcostgpu.domain.fleet import parse_fleet

_SHIPPED = files("lowcostgpu.domain")
SHIPPED_CATALOG: Traversable = _SHIPPED.joinpath("catalog.toml")
SHIPPED_DEMO_FLEET: Traversable = _SHIPPED.joinpath("fleets", "demo.toml")


def load_catalog(path: Path | None = None) -> Catalog:
    """The operator's catalog at `path`, or the shipped one (the prices of DESIGN.md)."""
    if path is None:
        return parse_catalog(_read_shipped(SHIPPED_CATALOG), source="shipped catalog.toml")
    text = read_config_text(path, what="catalog", option="--catalog")
    return parse_catalog(text, source=str(path))


def load_fleet(path: Path | None, catalog: Catalog) -> list[Host]:
    """The operator's fleet at `path`, or the shipped demo fleet (2 regions, 24 GPUs)."""
    if path is None:
        return parse_fleet(_read_shipped(SHIPPED_DEMO_FLEET), catalog, source="shipped demo fleet")
    text = read_config_text(path, what="fleet file", option="--fleet")
    return parse_fleet(text, catalog, source=str(path))


def read_config_text(path: Path, *, what: str, option: str) -> str:
    """Read a UTF-8 config file; any failure becomes a ConfigError naming the file and the fix."""
    fallback = f"check the path, or leave out {option} to use the shipped default"
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _error(f"{what} {path} does not exist", fallback, path) from None
    except IsADirectoryError:
        raise _error(f"{what} {path} is a directory, not a file", fallback, path) from None
    except PermissionError:
        hint = f"make it readable by this user (chmod a+r {path}), or {fallback}"
        raise _error(f"{what} {path} is not readable: permission denied", hint, path) from None
    except UnicodeDecodeError as exc:
        hint = "save it as UTF-8 text (TOML files are UTF-8)"
        message = f"{what} {path} is not UTF-8 text (byte {exc.start})"
        raise _error(message, hint, path) from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise _error(f"{what} {path} cannot be read: {reason}", fallback, path) from None


def _read_shipped(resource: Traversable) -> str:
    try:
        return resource.read_text(encoding="utf-8")
    except OSError as exc:  # a broken installation, not an operator mistake
        raise ConfigError(
            f"the shipped {resource.name} is missing from the lowcostgpu package: {exc}",
            hint="reinstall lowcostgpu (pip install --force-reinstall lowcostgpu)",
            source=resource.name,
        ) from None


def _error(message: str, hint: str, path: Path) -> ConfigError:
    return ConfigError(message, hint=hint, source=str(path))
