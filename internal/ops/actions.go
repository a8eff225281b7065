package ops

import (
	"fmt"
	"slices"
)

// Action is what an operator does, as ops knows it: a change's name is
// the one its audit rows carry. Each action needs a role (RoleOf): the
// admin API and the console ask ops for the role of each operation and
// page, so the two can never differ, and the audit log's filter takes
// exactly the changes' names (AuditActions).
type Action string

// The actions. Reading needs a viewer, but for the tokens (their names
// and teams are an admin's).
const (
	ActionRead      Action = "read"
	ActionTokenList Action = "token.list"

	ActionRoutePause        Action = "route.pause"
	ActionRouteResume       Action = "route.resume"
	ActionRetry             Action = "retry"
	ActionReplay            Action = "replay"
	ActionDeadRequeue       Action = "dead.requeue"
	ActionDeadDrop          Action = "dead.drop"
	ActionLaneSkip          Action = "lane.skip"
	ActionPurge             Action = "purge"
	ActionVersionReset      Action = "version.reset"
	ActionTokenCreate       Action = "token.create"
	ActionTokenRevoke       Action = "token.revoke"
	ActionTeamCreate        Action = "team.create"
	ActionRouteCreate       Action = "route.create"
	ActionRouteUpdate       Action = "route.update"
	ActionRouteRotateSecret Action = "route.rotate_secret"
	ActionRouteDelete       Action = "route.delete"
	ActionRouteReseal       Action = "route.reseal"
	ActionJobCancel         Action = "job.cancel"
	ActionTopologyApply     Action = "topology.apply"
)

// actions is the one table of the actions: the role each needs and
// whether it changes something (and so writes the audit log). An
// operator retries, replays, requeues, drops, skips a dead event that
// holds its resource and pauses; an admin also
// purges, resets versions, makes and changes routes and manages tokens.
// Teams, resealing and applying the topology are the platform's, from
// the CLI.
var actions = []actionRule{
	{ActionRead, RoleViewer, false},
	{ActionTokenList, RoleAdmin, false},

	{ActionRoutePause, RoleOperator, true},
	{ActionRouteResume, RoleOperator, true},
	{ActionRetry, RoleOperator, true},
	{ActionReplay, RoleOperator, true},
	{ActionDeadRequeue, RoleOperator, true},
	{ActionDeadDrop, RoleOperator, true},
	{ActionLaneSkip, RoleOperator, true},
	{ActionPurge, RoleAdmin, true},
	{ActionVersionReset, RoleAdmin, true},
	{ActionTokenCreate, RoleAdmin, true},
	{ActionTokenRevoke, RoleAdmin, true},
	{ActionTeamCreate, RoleAdmin, true},
	{ActionRouteCreate, RoleAdmin, true},
	{ActionRouteUpdate, RoleAdmin, true},
	{ActionRouteRotateSecret, RoleAdmin, true},
	{ActionRouteDelete, RoleAdmin, true},
	{ActionRouteReseal, RoleAdmin, true},
	{ActionJobCancel, RoleOperator, true},
	{ActionTopologyApply, RoleAdmin, true},
}

// actionRule is a row of the actions table.
type actionRule struct {
	action Action
	role   string
	change bool
}

// RoleOf is the role a token needs for a; "" for an action ops does not
// know (which a caller must refuse: fail closed).
func RoleOf(a Action) string {
	if i := slices.IndexFunc(actions, func(r actionRule) bool { return r.action == a }); i >= 0 {
		return actions[i].role
	}
	return ""
}

// Actions lists every action, reads first.
func Actions() []Action {
	out := make([]Action, len(actions))
	for i, r := range actions {
		out[i] = r.action
	}
	return out
}

// AuditActions are the actions the audit log holds: every change, and
// nothing else (entry refuses to write another).
var AuditActions = func() []string {
	var out []string
	for _, r := range actions {
		if r.change {
			out = append(out, string(r.action))
		}
	}
	return out
}()

// audits reports whether a is a change the audit log holds.
func audits(a Action) bool { return slices.Contains(AuditActions, string(a)) }

// errUndeclared refuses to audit an action missing from the table: a
// wiring fault, never an operator's.
func errUndeclared(a Action) error {
	return fmt.Errorf("ops: action %q is not a change of the actions table (actions.go)", a)
}
