# Tenant isolation, roles and scopes for gateway routes.
#
# Entry point: data.ignara.authz.decision -> {"allow": bool, "reasons": [string, ...]}
# Input and data schemas: see README.md in this directory.
#
# Note on negation: `not f(input.x)` is undefined (not true) when input.x is
# missing, so shape checks negate helper rules instead of builtin calls.
package ignara.authz

# Actions a tenant's principals perform on their own tenant's resources, and the
# roles that grant each. The platform `admin` role is checked separately.
tenant_actions := {
	"workloads.submit": {"member", "tenant-admin"},
	"workloads.list": {"member", "tenant-admin"},
	"workloads.read": {"member", "tenant-admin"},
	"workloads.cancel": {"member", "tenant-admin"},
	"workloads.logs": {"member", "tenant-admin"},
	"quota.read": {"member", "tenant-admin"},
	"usage.read": {"member", "tenant-admin"},
	"models.list": {"member", "tenant-admin"},
	"inference.call": {"member", "tenant-admin"},
	"keys.list": {"tenant-admin"},
	"keys.create": {"tenant-admin"},
	"keys.revoke": {"tenant-admin"},
	"live.read": {"tenant-admin"},
	"tenants.read": {"tenant-admin"},
	"principals.read": {"tenant-admin"},
	"audit.read": {"tenant-admin"},
}

# The scope a key must hold for each action; every `admin.*` action needs "admin".
action_scopes := {
	"workloads.submit": "workloads:write",
	"workloads.cancel": "workloads:write",
	"workloads.list": "workloads:read",
	"workloads.read": "workloads:read",
	"workloads.logs": "workloads:read",
	"quota.read": "usage:read",
	"usage.read": "usage:read",
	"models.list": "inference",
	"inference.call": "inference",
	"keys.list": "keys:read",
	"keys.create": "keys:write",
	"keys.revoke": "keys:write",
	"live.read": "usage:read",
	"tenants.read": "keys:read",
	"principals.read": "keys:read",
	"audit.read": "keys:read",
}

# Actions that spend a tenant's quota. Nobody, not even a platform admin, spends
# another tenant's quota.
spending_actions := {"workloads.submit", "inference.call"}

# Actions on one key: input.resource.roles holds the roles of the key created or
# revoked. Below a platform admin, a principal acts only on keys whose every role
# ranks below its own highest: a tenant admin on member keys, never on its peers'.
key_actions := {"keys.create", "keys.revoke", "admin.keys.create", "admin.keys.revoke"}

# Actions that issue a key: input.resource.scopes holds the new key's scopes, each of
# which the issuing principal must hold itself.
issuing_actions := {"keys.create", "admin.keys.create"}

role_rank := {"member": 1, "tenant-admin": 2, "admin": 3}

# --- Facts about the input ------------------------------------------------------

principal_is_object if is_object(input.principal)

roles_are_strings if {
	is_array(input.principal.roles)
	every r in input.principal.roles {
		is_string(r)
	}
}

scopes_are_strings if {
	is_array(input.principal.scopes)
	every s in input.principal.scopes {
		is_string(s)
	}
}

roles := {r | some r in input.principal.roles; is_string(r)}

scopes := {s | some s in input.principal.scopes; is_string(s)}

action := a if {
	a := input.action
	is_string(a)
}

admin_action if startswith(action, "admin.")

tenant_action if tenant_actions[action]

principal_tenant := t if {
	t := input.principal.tenant
	is_string(t)
}

resource_tenant := t if {
	t := input.resource.tenant
	is_string(t)
}

principal_name := n if {
	n := input.principal.id
	is_string(n)
} else := "(anonymous)"

# A platform admin belongs to no tenant. The admin role of a tenant's principal (an
# OIDC token may claim one) grants nothing: platform power is never held by accident.
is_admin if {
	"admin" in roles
	not principal_tenant
}

tenant_principal_claims_admin if {
	"admin" in roles
	principal_tenant
}

same_tenant if principal_tenant == resource_tenant

# An admin may read and manage any tenant's resources, but not spend its quota.
admin_reaches_tenant if {
	is_admin
	not action in spending_actions
}

role_permits if is_admin

role_permits if count(roles & tenant_actions[action]) > 0

verb := "spend the quota of" if action in spending_actions

else := "act on resources of"

needed_scope := action_scopes[action] if tenant_action

else := "admin" if admin_action

key_action if action in key_actions

issuing_action if action in issuing_actions

resource_roles_are_strings if {
	is_array(input.resource.roles)
	every r in input.resource.roles {
		is_string(r)
	}
}

resource_scopes_are_strings if {
	is_array(input.resource.scopes)
	every s in input.resource.scopes {
		is_string(s)
	}
}

# The highest rank among the principal's roles that count (a tenant's principal's
# admin role does not).
counted_ranks contains role_rank[r] if {
	some r in roles
	role_rank[r]
	not r == "admin"
}

counted_ranks contains 3 if is_admin

principal_rank := max(counted_ranks) if count(counted_ranks) > 0

else := 0

# An unknown role has no rank, so it is below no one (negate this, never the
# comparison: `not role_rank[r] < n` is undefined for an unknown r).
below_caller(role) if role_rank[role] < principal_rank

# --- Why a request is refused ------------------------------------------------------

deny contains "input.principal is missing or not an object" if not principal_is_object

deny contains "input.principal.roles must be an array of strings" if {
	principal_is_object
	not roles_are_strings
}

deny contains "input.principal.scopes must be an array of strings" if {
	principal_is_object
	not scopes_are_strings
}

deny contains "input.action is missing or not a string" if not action

deny contains sprintf("unknown action \"%s\"", [action]) if {
	action
	not admin_action
	not tenant_action
}

deny contains sprintf("action \"%s\" needs the admin role", [action]) if {
	admin_action
	not is_admin
	not tenant_principal_claims_admin
}

deny contains msg if {
	admin_action
	tenant_principal_claims_admin
	msg := sprintf(
		"action \"%s\" needs a platform admin; the admin role of a principal of tenant \"%s\" grants nothing (platform admin keys belong to no tenant)",
		[action, principal_tenant],
	)
}

deny contains msg if {
	needed_scope
	scopes_are_strings
	not needed_scope in scopes
	msg := sprintf(
		"scopes [%s] do not permit \"%s\"; it needs scope \"%s\"",
		[concat(", ", sort(scopes)), action, needed_scope],
	)
}

deny contains sprintf("action \"%s\" needs input.resource.tenant", [action]) if {
	tenant_action
	not resource_tenant
}

deny contains sprintf("action \"%s\" needs input.resource.roles (an array of strings)", [action]) if {
	key_action
	not resource_roles_are_strings
}

deny contains sprintf("action \"%s\" needs input.resource.scopes (an array of strings)", [action]) if {
	issuing_action
	not resource_scopes_are_strings
}

deny contains msg if {
	key_action
	not is_admin
	some r in input.resource.roles
	not below_caller(r)
	msg := sprintf(
		"role \"%s\" is not below the caller's own (roles [%s]): only a platform admin may create or revoke such a key",
		[r, concat(", ", sort(roles))],
	)
}

deny contains msg if {
	issuing_action
	some s in input.resource.scopes
	not s in scopes
	msg := sprintf("the caller's key lacks scope \"%s\", so it cannot grant it", [s])
}

deny contains sprintf("principal \"%s\" belongs to no tenant", [principal_name]) if {
	principal_is_object
	not is_admin
	not principal_tenant
}

deny contains msg if {
	tenant_action
	not role_permits
	needs := tenant_actions[action] | {"admin"}
	msg := sprintf(
		"roles [%s] do not permit \"%s\"; it needs one of: %s",
		[concat(", ", sort(roles)), action, concat(", ", sort(needs))],
	)
}

deny contains msg if {
	tenant_action
	principal_tenant
	resource_tenant
	not same_tenant
	not admin_reaches_tenant
	msg := sprintf(
		"principal of tenant \"%s\" may not %s tenant \"%s\"",
		[principal_tenant, verb, resource_tenant],
	)
}

deny contains msg if {
	tenant_action
	resource_tenant
	is_admin
	not principal_tenant
	not admin_reaches_tenant
	msg := sprintf("\"%s\" spends quota and needs a principal of tenant \"%s\"", [action, resource_tenant])
}

deny contains sprintf("tenant \"%s\" is not known to the gateway", [t]) if {
	not is_admin
	t := principal_tenant
	not data.ignara.tenants[t]
}

deny contains sprintf("tenant \"%s\" is suspended", [t]) if {
	not is_admin
	t := principal_tenant
	data.ignara.tenants[t].suspended == true
}

# --- What grants a request -----------------------------------------------------------

granted if {
	admin_action
	is_admin
}

granted if {
	tenant_action
	role_permits
	same_tenant
}

granted if {
	tenant_action
	resource_tenant
	admin_reaches_tenant
}

default allow := false

allow if {
	granted
	count(deny) == 0
}

# --- The decision ----------------------------------------------------------------------

decision := {"allow": true, "reasons": []} if allow

else := {"allow": false, "reasons": sort(deny)} if count(deny) > 0

else := {"allow": false, "reasons": ["no rule grants this request"]}
