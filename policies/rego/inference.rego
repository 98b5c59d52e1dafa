# Which models a tenant's callers may use, through which queue.
#
# Entry point: data.ignara.inference.decision -> {"allow": bool, "reasons": [string, ...]}
# Input: {"tenant": string, "model": string, "queue": string}; data: see README.md.
#
# Note on negation: `not f(input.x)` is undefined (not true) when input.x is
# missing, so shape checks negate helper rules instead of builtin calls.
package ignara.inference

tenant_name := t if {
	t := input.tenant
	is_string(t)
}

tenant := t if {
	t := data.ignara.tenants[tenant_name]
	is_object(t)
}

model_name := m if {
	m := input.model
	is_string(m)
}

queue := q if {
	q := input.queue
	is_string(q)
}

# The model's pool: the flavor its tokens are charged to.
flavor := f if {
	f := data.ignara.models[model_name].flavor
	is_string(f)
}

allowed(field) := {x | some x in tenant[field]}

# --- Who asks ----------------------------------------------------------------------

deny contains "input.tenant is missing or not a string" if not tenant_name

deny contains sprintf("tenant \"%s\" is not known to the gateway", [tenant_name]) if {
	tenant_name
	not tenant
}

deny contains sprintf("tenant \"%s\" is suspended", [tenant_name]) if tenant.suspended == true

# --- What it calls -----------------------------------------------------------------

deny contains "input.model is missing or not a string" if not model_name

deny contains sprintf("model \"%s\" does not exist", [model_name]) if {
	model_name
	not flavor
}

deny contains sprintf("model \"%s\" is not open to tenant \"%s\"", [model_name, tenant_name]) if {
	tenant
	flavor
	not model_name in allowed("models")
}

deny contains sprintf("flavor \"%s\" of model \"%s\" is not open to tenant \"%s\"", [flavor, model_name, tenant_name]) if {
	tenant
	not flavor in allowed("flavors")
}

# --- Whose quota it spends -------------------------------------------------------------

deny contains "input.queue is missing or not a string" if not queue

deny contains sprintf("queue \"%s\" is not open to tenant \"%s\"", [queue, tenant_name]) if {
	tenant
	queue
	not queue in allowed("queues")
}

# --- The decision ----------------------------------------------------------------------

default allow := false

allow if {
	count(deny) == 0
	tenant
	model_name in allowed("models")
	flavor in allowed("flavors")
	queue in allowed("queues")
}

decision := {"allow": true, "reasons": []} if allow

else := {"allow": false, "reasons": sort(deny)} if count(deny) > 0

else := {"allow": false, "reasons": ["no rule admits this call"]}
