// Package migrate installs Synchro's database objects: the goose migrations of
// sql/schema, then the function bundle of sql/functions in one transaction (its
// folders in the order of sql/functions/load_order.txt, bundle.go), with the
// bundle's digest recorded in synchro.function_bundle. It also checks that a
// database matches what this binary was built with.
//
// Rolling back is goose's down (docs/operations.md, "Migrations"). Down sections drop with
// CASCADE: the bundle's views and functions over what they drop go with it. Any
// change of the applied migrations forgets the installed bundle
// (synchro.forget_bundle), so Check fails until Apply installs it again.
//
// It owns installing the schema and the bundle (synchroctl migrate) and the
// version check (synchrod's start, Check); synchrod must never migrate, and
// nothing here holds sync or capture logic: that is the bundle's.
package migrate
