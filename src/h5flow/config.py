"""Typed configuration: what the SENSEI-style XML front (:mod:`h5flow.xmlconfig`) produces.

Everything inside h5flow works on these dataclasses; XML is only one way to build them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class _SettingsView:
    """Reading a settings field through the config that holds it: ``cfg.plane_size`` is ``cfg.settings.plane_size``."""

    def __getattr__(self, name: str) -> Any:
        settings = self.__dict__.get("settings")
        if not name.startswith("_") and settings is not None and hasattr(settings, name):
            return getattr(settings, name)
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")


@dataclass
class PartitionerConfig(_SettingsView):
    """Which partitioner a consumer uses: its ``type`` and ``settings``, the partitioner's own settings dataclass
    (:class:`h5flow.partitioners.base.PartitionerSettings`: ``PlanarSettings(plane_size=2)``, ...), read as
    ``cfg.settings.plane_size`` (or ``cfg.plane_size``). Left out, ``settings`` is the partitioner's defaults.
    A plugin partitioner without a settings class gets its XML attributes as strings in ``params``.
    """

    type: str = "block"  # block | planar | mapped | a registered partitioner's name
    settings: Any = None  # the partitioner's settings (its SETTINGS dataclass); None: its defaults
    params: dict[str, str] = field(default_factory=dict)  # a plugin partitioner without SETTINGS: its attributes

    def __post_init__(self) -> None:
        if self.settings is None:
            from h5flow.partitioners import settings_class

            cls = settings_class(self.type)
            self.settings = cls() if cls is not None else None

    @classmethod
    def of(cls, type: str = "block", **keywords: Any) -> PartitionerConfig:  # noqa: A002 - the XML attribute
        """A partitioner config built in code: ``PartitionerConfig.of("planar", plane_size=2)``; the keywords go to
        its settings class (a plugin partitioner without one gets them, as strings, in ``params``)."""
        from h5flow.partitioners import settings_class

        settings_cls = settings_class(type)
        if settings_cls is None:
            return cls(type=type, params={k: str(v) for k, v in keywords.items()})
        return cls(type=type, settings=settings_cls.from_keywords(keywords))


@dataclass
class TransportConfig:
    """One stream's transport: what every transport has, plus ``settings``, the transport's own settings
    dataclass (:class:`h5flow.transports.TransportSettings`: e.g.
    :class:`h5flow.transports.hdf5.settings.Hdf5Settings` with ``layout``, ``queue_limit``, ...).

    ``settings`` is always set: left out (``None``), it is the transport's defaults (its registry entry's
    settings class, built without arguments); given, it must be an instance of that class. To build one from
    keyword settings, use :meth:`of`: ``TransportConfig.of("hdf5", filename=..., layout="n-n")``.
    """

    type: str = "hdf5"  # hdf5 | socket | adios2 | a registered transport's name
    filename: str = ""  # the stream's name; hdf5: staging directory is filename + ".h5flow"
    enabled: bool = True
    partitioner: PartitionerConfig = field(default_factory=PartitionerConfig)
    source: str = ""  # where it was defined ("file.xml:3"), for messages
    mapped_from: str = ""  # a legacy SENSEI transport this one stands in for ('adios1 method="FLEXPATH"'), else ""
    settings: Any = None  # the transport's own settings (its TransportSettings dataclass); None: its defaults

    def __post_init__(self) -> None:
        from h5flow.transports import entry

        cls = entry(self.type).settings
        if self.settings is None:
            self.settings = cls()
        elif not isinstance(self.settings, cls):
            raise TypeError(f"settings={type(self.settings).__name__}(...) given for transport {self.type!r}, whose "
                            f"settings are {cls.__name__}; give a {cls.__name__} or leave settings out (its "
                            "defaults)")

    @classmethod
    def of(cls, type: str = "hdf5", filename: str = "", *,  # noqa: A002 - the XML attribute's name
           partitioner: PartitionerConfig | str | None = None, enabled: bool = True, source: str = "",
           mapped_from: str = "", settings: Any = None, **keywords: Any) -> TransportConfig:
        """A config built in code with the transport's own settings as keywords:
        ``TransportConfig.of("socket", "/dev/shm/run", queue_limit=4, heartbeat=2.0)``.

        ``keywords`` go to the transport's settings class (:meth:`TransportSettings.from_keywords`), which
        refuses a name it does not have (``TypeError`` listing the accepted ones); ``partitioner`` may be a
        partitioner's name (``"planar"``) or a :class:`PartitionerConfig`.
        """
        from h5flow.transports import entry

        settings_cls = entry(type).settings
        if keywords:
            if settings is not None:
                raise TypeError(f"give settings={settings.__class__.__name__}(...) or the keywords "
                                f"{sorted(keywords)}, not both")
            settings = settings_cls.from_keywords(keywords)
        if isinstance(partitioner, str):
            partitioner = PartitionerConfig(type=partitioner)
        return cls(type=type, filename=filename, enabled=enabled,
                   partitioner=partitioner if partitioner is not None else PartitionerConfig(), source=source,
                   mapped_from=mapped_from, settings=settings)


@dataclass
class AnalysisConfig(_SettingsView):
    """One ``<analysis>``: its ``type`` and ``settings``, the analysis' own settings dataclass
    (:class:`h5flow.analyses.base.AnalysisSettings`: ``HistogramSettings(mesh=..., bins=...)``, ...), read as
    ``cfg.settings.bins`` (or ``cfg.bins``). Left out, ``settings`` is the analysis' defaults; in code use
    :meth:`of`: ``AnalysisConfig.of("histogram", array="temperature", bins=32)``.
    """

    type: str = "histogram"
    enabled: bool = True
    source: str = ""
    settings: Any = None  # the analysis' settings (its SETTINGS dataclass); None: its defaults

    def __post_init__(self) -> None:
        if self.settings is None:
            from h5flow.analyses import settings_class

            self.settings = settings_class(self.type)()

    @classmethod
    def of(cls, type: str = "histogram", *, enabled: bool = True, source: str = "",  # noqa: A002
           **keywords: Any) -> AnalysisConfig:
        """An analysis config built in code; the keywords go to its settings class (``from_keywords``)."""
        from h5flow.analyses import settings_class

        return cls(type=type, enabled=enabled, source=source,
                   settings=settings_class(type).from_keywords(keywords))


@dataclass
class SenseiConfig:
    path: str = "<memory>"
    transports: list[TransportConfig] = field(default_factory=list)
    analyses: list[AnalysisConfig] = field(default_factory=list)

    def transport(self) -> TransportConfig:
        """The one enabled transport (producer ``<analysis type="hdf5">`` or ``<transport>``)."""
        enabled = [t for t in self.transports if t.enabled]
        if len(enabled) != 1:
            raise ValueError(f"{self.path}: expected exactly one enabled transport, found {len(enabled)}")
        return enabled[0]
