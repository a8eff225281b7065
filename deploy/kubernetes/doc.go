// Package kubernetes holds the Helm chart of hookrelay (hookrelay/) and its
// test, which renders the chart with Helm's own engine and decodes every
// object strictly into the Kubernetes API types. It is a module of its own,
// so that the relay's go.mod does not carry Helm and client-go.
package kubernetes
