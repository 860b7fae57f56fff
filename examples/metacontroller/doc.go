// Package metacontroller holds the Metacontroller examples served by
// cmd/opzero-metacontroller (README.md) and their end-to-end test through
// `opzero dev`; there is no Go code to import.
package metacontroller
