// Package core is what every request processor of extproc shares, and nothing else: the
// compiled configuration a request runs under (Runtime, its models and keys: runtime.go,
// routes.go), the client-facing error and the Envoy messages that carry answers (errors.go,
// envoy.go, envoymode.go, headers.go), the API's endpoints (endpoints.go), and the small
// server-wide state a request touches (keyuse.go, hints.go).
//
// It is one package rather than an Envoy-helpers package beside a runtime package because no
// processor uses one without the other: chat, media tasks and the paid wrapper all read the
// Runtime and answer through the same errors and messages. It imports no processor, so each
// processor package (extproc/chat, extproc/tasks, extproc/x402/paid) and extproc itself can
// import it without a cycle.
package core
