// Package cloudevent decodes what a serverless operator receives over HTTP
// into typed values: Knative ApiServerSource events in Resource and
// Reference mode, PingSource ticks, and opzero's own wakeups. It uses the
// CloudEvents SDK for the transport (binary and structured content modes)
// and checks that an event's parts agree before anything acts on it.
//
// # Guarantees
//
//   - Decode never panics on any input and returns an error that names the
//     problem (missing extension, subject that disagrees with the object,
//     data that is not the JSON object the type promises, ...).
//   - An ObjectEvent's kind, apiVersion, namespace and name have been
//     checked against the object (Resource mode) or the reference (Reference
//     mode) and against the subject.
//
// Wire formats: docs/knative-events.md.
package cloudevent
