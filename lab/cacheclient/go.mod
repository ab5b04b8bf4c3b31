module ghostip.lab/cacheclient

go 1.25.0
