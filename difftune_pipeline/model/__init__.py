"""DiffTune's data model: parameter spaces and sampling (``params``,
``sampling``), a block's dependency graph (``graph``), its hardware features
(``features``), and the metrics results are judged by (``metrics``)."""
