// Package capture defines what the fence triggers and registry changes put into
// the WAL as transactional logical messages, and parses it strictly: a message
// that is malformed in any way is a blocking capture failure, never guessed at.
package capture

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
)

// Message prefixes emitted by sql/functions/fence.sql and
// sql/functions/activate_registry_generation.sql.
const (
	FencePrefix    = "synchro.fence"
	RegistryPrefix = "synchro.registry"
)

// Registration kinds.
const (
	KindSynced     = "synced"
	KindDependency = "capture_dependency"
)

// Relation is a schema-qualified physical relation identity.
type Relation struct {
	Schema string `json:"schema"`
	Name   string `json:"name"`
	OID    uint32 `json:"oid"`
}

// Fence is one write fence: the trigger's record of one row operation.
type Fence struct {
	RegistrationKind string          `json:"registration_kind"`
	RelationID       int64           `json:"relation_id"`
	Relation         Relation        `json:"relation"`
	Op               string          `json:"op"`
	Version          string          `json:"version"`
	FenceID          string          `json:"fence_id"`
	Ordinal          int64           `json:"ordinal"`
	OldKey           json.RawMessage `json:"old_key,omitempty"`
	NewKey           json.RawMessage `json:"new_key,omitempty"`
	TableID          *int32          `json:"table_id,omitempty"`
}

// Key is the canonical text of the fence's row identity key (new key for
// inserts and updates, old key for deletes), as pgoutput renders key values.
func (f Fence) Key() string {
	if f.Op == "delete" {
		return KeyText(f.OldKey)
	}
	return KeyText(f.NewKey)
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// ParseFence decodes and validates one fence message. Every field is required
// as the registration kind and operation dictate; unknown fields are rejected.
func ParseFence(b []byte) (Fence, error) {
	var f Fence
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&f); err != nil {
		return f, fmt.Errorf("fence message: %w", err)
	}
	if dec.More() {
		return f, fmt.Errorf("fence message: trailing data")
	}
	switch {
	case f.RelationID <= 0:
		return f, fmt.Errorf("fence message: missing relation_id")
	case f.Relation.Schema == "" || f.Relation.Name == "" || f.Relation.OID == 0:
		return f, fmt.Errorf("fence message: incomplete relation identity")
	case f.Version == "":
		return f, fmt.Errorf("fence message: missing version")
	case !uuidRE.MatchString(f.FenceID):
		return f, fmt.Errorf("fence message: fence_id is not a canonical UUID")
	case f.Ordinal <= 0:
		return f, fmt.Errorf("fence message: ordinal must be positive")
	}
	switch f.RegistrationKind {
	case KindSynced:
		if f.TableID == nil || *f.TableID <= 0 {
			return f, fmt.Errorf("fence message: synced registration without table_id")
		}
	case KindDependency:
		if f.TableID != nil {
			return f, fmt.Errorf("fence message: capture_dependency registration with table_id")
		}
	default:
		return f, fmt.Errorf("fence message: unknown registration_kind")
	}
	hasOld, hasNew := len(f.OldKey) > 0, len(f.NewKey) > 0
	switch f.Op {
	case "insert":
		if hasOld || !hasNew {
			return f, fmt.Errorf("fence message: insert needs new_key only")
		}
	case "update":
		if !hasOld || !hasNew || KeyText(f.OldKey) != KeyText(f.NewKey) {
			return f, fmt.Errorf("fence message: update needs equal old_key and new_key")
		}
	case "delete":
		if !hasOld || hasNew {
			return f, fmt.Errorf("fence message: delete needs old_key only")
		}
	default:
		return f, fmt.Errorf("fence message: unknown op")
	}
	for _, k := range []json.RawMessage{f.OldKey, f.NewKey} {
		if len(k) > 0 && KeyText(k) == "" {
			return f, fmt.Errorf("fence message: key is not a string or integer")
		}
	}
	return f, nil
}

// KeyText renders a JSON key (string or integer) as canonical text; "" when it
// is neither.
func KeyText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			return s
		}
		return ""
	}
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil {
		if _, err := n.Int64(); err == nil {
			return n.String()
		}
	}
	return ""
}

// RegistryActivation is the message that activates a registry generation.
type RegistryActivation struct {
	Generation int64 `json:"generation"`
}

// ParseRegistryActivation decodes and validates a registry activation message.
func ParseRegistryActivation(b []byte) (RegistryActivation, error) {
	var a RegistryActivation
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return a, fmt.Errorf("registry message: %w", err)
	}
	if a.Generation <= 0 {
		return a, fmt.Errorf("registry message: generation must be positive")
	}
	return a, nil
}
