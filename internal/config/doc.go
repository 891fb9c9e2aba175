// Package config reads Synchro's settings from command-line flags, each with an
// environment-variable equivalent named in its usage text, "(env NAME)". A flag
// given on the command line wins over the environment, which wins over the
// flag's default.
//
// It owns that precedence rule and the flags every command shares ([Common]:
// the database URL, the publication and the slot); the flags of one command are
// defined by that command, their defaults and limits where they are used. No
// other package of the server reads the environment for a setting.
package config
