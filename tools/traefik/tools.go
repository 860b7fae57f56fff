//go:build tools

// Package tools records what this module builds so that go mod tidy keeps
// its dependencies.
package tools

import _ "github.com/traefik/traefik/v3/cmd/traefik"
