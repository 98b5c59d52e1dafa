# Tenant isolation and role-based access for gateway routes.
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
}

# Actions that spend a tenant's quota. Nobody, not even a platform admin, spends
# another tenant's quota.
spending_actions := {"workloads.submit", "inference.call"}

# --- Facts about the input ------------------------------------------------------

principal_is_object if is_object(input.principal)

roles_are_strings if {
	is_array(input.principal.roles)
	every r in input.principal.roles {
		is_string(r)
	}
}

roles := {r | some r in input.principal.roles; is_string(r)}

is_admin if "admin" in roles

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

# --- Why a request is refused ------------------------------------------------------

deny contains "input.principal is missing or not an object" if not principal_is_object

deny contains "input.principal.roles must be an array of strings" if {
	principal_is_object
	not roles_are_strings
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
}

deny contains sprintf("action \"%s\" needs input.resource.tenant", [action]) if {
	tenant_action
	not resource_tenant
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
