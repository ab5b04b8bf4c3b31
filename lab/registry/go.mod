module ghostip.lab/registry

go 1.25.0
