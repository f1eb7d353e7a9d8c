module github.com/sluicehq/sluice/store/lease

go 1.26.0

require (
	github.com/sluicehq/sluice v0.0.0-00010101000000-000000000000
	github.com/sluicehq/sluice/store/redisstore v0.0.0-00010101000000-000000000000
)

require (
	github.com/redis/rueidis v1.0.79 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
