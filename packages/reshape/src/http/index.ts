/**
 * `@rigging/reshape/http`: a Placement-compatible subset of the REST API over any
 * {@link ReshapeStore}, on plain `node:http` request/response objects (mountable in Express,
 * Fastify's raw handlers, or its own server).
 */
export {
  createPlacementHandler,
  createPlacementServer,
  type AuthResult,
  type PlacementHandler,
  type PlacementHandlerOptions,
} from './handler.js';
export { MAX_MICROVERSION } from './microversion.js';
