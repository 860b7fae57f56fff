//go:build tools

// Package tools records what this module builds or reads so that go mod
// tidy keeps it: the adapters `opzero dev` runs as processes, and the
// components `opzero cluster up --knative` runs as images.
package tools

import (
	_ "knative.dev/eventing/cmd/apiserver_receive_adapter"
	_ "knative.dev/eventing/cmd/auth_proxy"
	_ "knative.dev/eventing/cmd/controller"
	_ "knative.dev/eventing/cmd/jobsink"
	_ "knative.dev/eventing/cmd/mtping"
	_ "knative.dev/eventing/cmd/requestreply"
	_ "knative.dev/eventing/cmd/webhook"
	_ "knative.dev/serving/cmd/activator"
	_ "knative.dev/serving/cmd/autoscaler"
	_ "knative.dev/serving/cmd/controller"
	_ "knative.dev/serving/cmd/queue"
	_ "knative.dev/serving/cmd/webhook"
	_ "knative.dev/serving/pkg/apis/serving/v1"
)
