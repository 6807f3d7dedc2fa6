"""What the steps share, grouped by idea: `training/`, `weights/`, `data/`, `release/`, `serving/`, `storage/`,
`caching/`; beside them the step runner (`runner`), the configuration names every loaded config fills
(`config_names`), library noise kept out of logs (`noise`) and the plots (`plots`)."""
