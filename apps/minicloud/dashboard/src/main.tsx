import { render } from 'preact';
import { App } from './app.js';
import { SignInGate } from './signin.js';
// In cascade order: phone widths override the rest.
import './styles/base.css';
import './styles/status.css';
import './styles/providers.css';
import './styles/rows.css';
import './styles/plan.css';
import './styles/cache.css';
import './styles/responsive.css';
import './styles/signin.css';

const root = document.getElementById('app');
if (root) {
  render(
    <SignInGate>
      <App />
    </SignInGate>,
    root,
  );
}
