package mcp

import "encoding/json"

// FullOutputSchemas are the tools' output schemas before compaction, by
// name: the contract's components and the shapes of outputs.go, which the
// end-to-end tests check every answer against beside the published one.
func FullOutputSchemas() (map[string]json.RawMessage, error) {
	comps, err := loadComponents()
	if err != nil {
		return nil, err
	}
	out := make(map[string]json.RawMessage, len(outputSchemas))
	for name := range outputSchemas {
		if out[name], err = comps.outputSchema(name); err != nil {
			return nil, err
		}
	}
	return out, nil
}
