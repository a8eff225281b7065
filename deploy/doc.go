// Package deploy holds the Grafana dashboard and Prometheus rules; its test checks they name only metrics hookrelay exports.
package deploy
