"""One module per sidebar page. A page is a QWidget built from an EngineProcess."""
