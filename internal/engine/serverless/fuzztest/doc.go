// Package fuzztest fuzzes the serverless engine's intake (decoding, routing,
// generation skipping) without a control plane: its client answers every
// read with an error, so the fuzzer explores every path but a reconcile's.
package fuzztest
