//go:build tools

// Package tools records what this module builds or reads so that go mod
// tidy keeps it.
package tools

import (
	_ "knative.dev/eventing/cmd/apiserver_receive_adapter"
	_ "knative.dev/eventing/cmd/mtping"
	_ "knative.dev/serving/pkg/apis/serving/v1"
)
