package client

import "encoding/json"

// protocolVersion is the wire protocol version the SDK speaks (docs/protocol.md).
const protocolVersion = 3

// Wire shapes of docs/protocol.md (only the fields the SDK uses).
type (
	schemaRef struct {
		Version int64  `json:"version"`
		Hash    string `json:"hash"`
	}
	cursorRef struct {
		Cursor *string `json:"cursor"`
	}
	scopeDiff struct {
		Add []struct {
			ID string `json:"id"`
		} `json:"add"`
		Remove []string `json:"remove"`
	}
	connectRequest struct {
		ClientID        string               `json:"client_id"`
		Platform        string               `json:"platform,omitempty"`
		AppVersion      string               `json:"app_version,omitempty"`
		ProtocolVersion int                  `json:"protocol_version"`
		Schema          *schemaRef           `json:"schema,omitempty"`
		ScopeSetVersion int64                `json:"scope_set_version"`
		KnownScopes     map[string]cursorRef `json:"known_scopes"`
	}
	connectResponse struct {
		Schema struct {
			Version int64  `json:"version"`
			Hash    string `json:"hash"`
			Action  string `json:"action"`
		} `json:"schema"`
		SchemaDefinition json.RawMessage `json:"schema_definition"`
		ScopeSetVersion  int64           `json:"scope_set_version"`
		Scopes           scopeDiff       `json:"scopes"`
		Rebuild          []string        `json:"rebuild"`
	}
	mutation struct {
		MutationID  string                     `json:"mutation_id"`
		Table       string                     `json:"table"`
		Op          string                     `json:"op"`
		PK          json.RawMessage            `json:"pk"`
		BaseVersion *string                    `json:"base_version,omitempty"`
		Columns     map[string]json.RawMessage `json:"columns,omitempty"`
	}
	pushRequest struct {
		ClientID  string     `json:"client_id"`
		BatchID   string     `json:"batch_id"`
		Schema    *schemaRef `json:"schema,omitempty"`
		Mutations []mutation `json:"mutations"`
	}
	outcome struct {
		MutationID    string          `json:"mutation_id"`
		Status        string          `json:"status"`
		Code          string          `json:"code"`
		Message       string          `json:"message"`
		ServerVersion *string         `json:"server_version"`
		ServerRow     json.RawMessage `json:"server_row"`
		// ServerRowOmitted: the answer left the applied row out (its byte
		// budget was spent); the row arrives by pull.
		ServerRowOmitted bool `json:"server_row_omitted"`
	}
	pushResponse struct {
		Accepted []outcome `json:"accepted"`
		Rejected []outcome `json:"rejected"`
	}
	pullRequest struct {
		ClientID        string               `json:"client_id"`
		Schema          *schemaRef           `json:"schema,omitempty"`
		ScopeSetVersion int64                `json:"scope_set_version"`
		Scopes          map[string]cursorRef `json:"scopes"`
		Limit           int                  `json:"limit"`
		WaitMs          int64                `json:"wait_ms,omitempty"`
	}
	change struct {
		Scope         string          `json:"scope"`
		Table         string          `json:"table"`
		Op            string          `json:"op"`
		PK            json.RawMessage `json:"pk"`
		Row           json.RawMessage `json:"row"`
		ServerVersion string          `json:"server_version"`
		RowChecksum   uint32          `json:"row_checksum"`
	}
	pullResponse struct {
		Changes         []change                   `json:"changes"`
		ScopeCursors    map[string]string          `json:"scope_cursors"`
		ScopeSetVersion int64                      `json:"scope_set_version"`
		ScopeUpdates    scopeDiff                  `json:"scope_updates"`
		Rebuild         []string                   `json:"rebuild"`
		HasMore         bool                       `json:"has_more"`
		Checksums       map[string]json.RawMessage `json:"checksums"`
	}
	rebuildRequest struct {
		ClientID string     `json:"client_id"`
		Schema   *schemaRef `json:"schema,omitempty"`
		Scope    string     `json:"scope"`
		Cursor   *string    `json:"cursor"`
		Limit    int        `json:"limit"`
	}
	rebuildResponse struct {
		Records []struct {
			Table         string          `json:"table"`
			PK            json.RawMessage `json:"pk"`
			Row           json.RawMessage `json:"row"`
			ServerVersion string          `json:"server_version"`
			RowChecksum   uint32          `json:"row_checksum"`
		} `json:"records"`
		Cursor           *string         `json:"cursor"`
		HasMore          bool            `json:"has_more"`
		FinalScopeCursor *string         `json:"final_scope_cursor"`
		Checksum         json.RawMessage `json:"checksum"`
	}
)
