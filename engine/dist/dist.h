#pragma once

// The public distributed API, after mmengine.dist: include this one header.
#include "engine/dist/backend_registry.h"
#include "engine/dist/collectives.h"
#include "engine/dist/context.h"
#include "engine/dist/errors.h"
#include "engine/dist/flight.h"
#include "engine/dist/helpers.h"
#include "engine/dist/info.h"
#include "engine/dist/init.h"
#include "engine/dist/node_shared.h"
#include "engine/dist/objects.h"
#include "engine/launch/launch.h"
