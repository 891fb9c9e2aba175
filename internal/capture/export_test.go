package capture

// The materialization contract's Go side, for the contract tests of package
// capture_test (which use internal/testdb, itself an importer of capture).

// BatchJSON is batchJSON.
func BatchJSON(txns []Prepared) []byte { return batchJSON(txns) }

// EventColumns is eventColumns.
var EventColumns = eventColumns

// EventValues returns the values eventRows copies for one event.
func EventValues() ([]any, error) {
	r := &eventRows{txns: []Prepared{{Events: make([]stagedEvent, 1)}}}
	if !r.Next() {
		return nil, nil
	}
	return r.Values()
}

// ParseLayout reports whether the fence message b takes parseLayout's fast path.
func ParseLayout(b []byte) bool {
	_, ok := parseLayout(b, nil)
	return ok
}
