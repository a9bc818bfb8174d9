// Package wire holds the JSON shapes that more than one surface answers —
// the REST control surface /v1 and the agent tool surface /mcp — and their
// conversion from the read models. The read models (package projections)
// and the application (package commands) keep plain structs: how a value
// is spelled on the wire is the contract's business (spec 2.4–2.6, the
// OpenAPI document), and keeping it here means a column added to a read
// model never reaches a client by accident, and a renamed field is changed
// in one place for both surfaces.
//
// A shape only one surface answers stays in that surface's package (the
// API key record, the receipt page, the screenshot forms in http; the
// observation and batch results in mcp). Receipts are rendered from
// domain.Receipt itself, which carries its JSON names because the receipt
// is also the signed record the domain defines.
package wire

// each converts every read-model row with conv. The result is never nil, so
// a list is always a JSON array, [] when empty, as the contract requires.
func each[R, W any](rows []R, conv func(R) W) []W {
	out := make([]W, len(rows))
	for i, r := range rows {
		out[i] = conv(r)
	}
	return out
}
