// Package deploy holds the Grafana dashboard and Prometheus rules; its test checks they name only metrics hookrelay exports. The Helm chart, kubernetes/, is a Go module of its own with its own test.
package deploy
