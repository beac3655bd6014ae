module github.com/pveflow/pveflow

go 1.26.8

require (
	github.com/kdomanski/iso9660 v0.4.0 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)
