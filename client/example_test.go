package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/synchro-sync/synchro/client"
)

// Open a replica and sync it: the tables come from the server's schema, the
// rows from the scopes the server assigns the user (here user:ann and the
// shared templates_public).
func Example() {
	ctx := context.Background()
	server := startExampleServer() // a synchrod serving examples/notes
	dir, _ := os.MkdirTemp("", "synchro-example-")
	defer os.RemoveAll(dir)

	c, err := client.Open(ctx, filepath.Join(dir, "app.sqlite"), client.Config{
		ServerURL: server.URL,
		Token:     server.Token("ann"),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if err := c.Sync(ctx); err != nil {
		log.Fatal(err)
	}

	fmt.Println("tables:", c.Tables())
	scopes, _ := c.Scopes(ctx)
	for _, s := range scopes {
		fmt.Printf("scope %s: %d rows\n", s.ID, s.Rows)
	}
	var title string
	_ = c.DB().QueryRowContext(ctx, `SELECT title FROM templates WHERE id = 't-todo'`).Scan(&title)
	fmt.Println("template t-todo:", title)
	// Output:
	// tables: [notebooks pages shared_notes templates]
	// scope templates_public: 3 rows
	// scope user:ann: 0 rows
	// template t-todo: To-do list
}

// A local write is plain SQL on the replica; the next Sync pushes it. Columns
// the server fills (updated_at DEFAULT now()) may be left out: the server's
// row, with the value it filled in, replaces the local one.
func Example_localWrite() {
	ctx := context.Background()
	server := startExampleServer()
	dir, _ := os.MkdirTemp("", "synchro-example-")
	defer os.RemoveAll(dir)

	c, err := client.Open(ctx, filepath.Join(dir, "app.sqlite"), client.Config{ServerURL: server.URL, Token: server.Token("bob")})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if err := c.Sync(ctx); err != nil { // creates the tables
		log.Fatal(err)
	}

	if _, err := c.DB().ExecContext(ctx, `INSERT INTO notebooks (id, owner_id, title) VALUES ('nb-bob', 'bob', 'Ideas')`); err != nil {
		log.Fatal(err)
	}
	pending, _ := c.Pending(ctx)
	fmt.Println("queued:", pending)

	report, err := c.SyncReport(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("pushed:", report.Pushed, "rejected:", report.Rejected, "pending:", report.Pending)
	var filled bool
	_ = c.DB().QueryRowContext(ctx, `SELECT updated_at IS NOT NULL FROM notebooks WHERE id = 'nb-bob'`).Scan(&filled)
	fmt.Println("updated_at filled by the server:", filled)
	// Output:
	// queued: 1
	// pushed: 1 rejected: 0 pending: 0
	// updated_at filled by the server: true
}

// Two replicas of one user change the same row offline. The first push wins;
// the second is a conflict: the SDK records it in Rejections and gives the
// replica the server's row. Errors of the protocol are *client.Error values.
func Example_conflict() {
	ctx := context.Background()
	server := startExampleServer()
	dir, _ := os.MkdirTemp("", "synchro-example-")
	defer os.RemoveAll(dir)
	open := func(name string) *client.Client {
		c, err := client.Open(ctx, filepath.Join(dir, name+".sqlite"), client.Config{ServerURL: server.URL, Token: server.Token("cat")})
		if err != nil {
			log.Fatal(err)
		}
		return c
	}
	laptop, phone := open("laptop"), open("phone")
	defer laptop.Close()
	defer phone.Close()

	mustSync := func(c *client.Client) {
		if err := c.Sync(ctx); err != nil {
			log.Fatal(err)
		}
	}
	mustSync(laptop) // creates the tables
	if _, err := laptop.DB().ExecContext(ctx, `INSERT INTO notebooks (id, owner_id, title) VALUES ('nb-cat', 'cat', 'Plans')`); err != nil {
		log.Fatal(err)
	}
	mustSync(laptop) // pushes it; its pull waits until the push is captured
	mustSync(phone)  // the phone gets the notebook

	_, _ = laptop.DB().ExecContext(ctx, `UPDATE notebooks SET title = 'Plans (laptop)' WHERE id = 'nb-cat'`)
	_, _ = phone.DB().ExecContext(ctx, `UPDATE notebooks SET title = 'Plans (phone)' WHERE id = 'nb-cat'`)
	mustSync(laptop) // applied
	mustSync(phone)  // a conflict: base_version is not the current version

	rejections, _ := phone.Rejections(ctx)
	for _, r := range rejections {
		fmt.Println("phone:", r.Code, r.Table, r.PK)
	}
	var title string
	_ = phone.DB().QueryRowContext(ctx, `SELECT title FROM notebooks WHERE id = 'nb-cat'`).Scan(&title)
	fmt.Println("phone now holds:", title)

	// A request the server refuses is a *client.Error with the protocol's code.
	bad, _ := client.Open(ctx, filepath.Join(dir, "bad.sqlite"), client.Config{ServerURL: server.URL,
		Token: func(context.Context) (string, error) { return "not-a-token", nil }})
	defer bad.Close()
	var e *client.Error
	if err := bad.Sync(ctx); errors.As(err, &e) {
		fmt.Println("bad token:", e.Status, e.Code)
	}
	// Output:
	// phone: version_conflict notebooks {"id":"nb-cat"}
	// phone now holds: Plans (laptop)
	// bad token: 401 auth_required
}
